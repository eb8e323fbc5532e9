// data/text_set.hpp: the three layouts, what can be wrong with each, the stratified split's
// laws (mutated CSV and JSONL files: tests/fuzz/readers.cpp).
#include <fstream>
#include <random>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include <ftopt/data/text_set.hpp>
#include <ftopt/json.hpp>

#include "../support.hpp"

using namespace ftopt;

namespace {
void write(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}
} // namespace

TEST_CASE("load_text_folder: classes are the sorted sub-folders, texts sorted by path", "[data]") {
  test::ScratchDir dir("text-folder");
  write(dir.path / "sport" / "002.txt", "Goal!");
  write(dir.path / "sport" / "001.txt", "Match report");
  write(dir.path / "business" / "001.txt", "Shares rose");
  write(dir.path / "business" / "notes.md", "not a text of the set");
  write(dir.path / "__pycache__" / "x.txt", "a package's own folder");
  const auto set = data::load_text_folder(dir.path);
  CHECK(set.classes == std::vector<std::string>{"business", "sport"});
  CHECK(set.texts == std::vector<std::string>{"Shares rose", "Match report", "Goal!"});
  CHECK(set.labels == std::vector<std::int64_t>{0, 1, 1});
  CHECK(set.sources[2] == (dir.path / "sport" / "002.txt").string());
  CHECK(set.replaced == 0);
}

TEST_CASE("load_text_folder: bad UTF-8, empty classes, no classes", "[data]") {
  test::ScratchDir dir("text-folder-bad");
  write(dir.path / "a" / "1.txt", "fine");
  write(dir.path / "b" / "1.txt", "price \xA3" "5");
  const auto message = test::message_of([&] { data::load_text_folder(dir.path); });
  CHECK(message.find((dir.path / "b" / "1.txt").string() + ": not UTF-8 at byte 6") != std::string::npos);
  const auto repaired = data::load_text_folder(dir.path, {.errors = data::Utf8Errors::Replace});
  CHECK(repaired.texts[1] == "price \xEF\xBF\xBD" "5");
  CHECK(repaired.replaced == 1);
  std::filesystem::create_directories(dir.path / "c");
  CHECK(test::message_of([&] { data::load_text_folder(dir.path, {.errors = data::Utf8Errors::Replace}); })
            .find("class folder " + (dir.path / "c").string() + " has no text files") != std::string::npos);
  test::ScratchDir empty("text-folder-empty");
  CHECK(test::message_of([&] { data::load_text_folder(empty.path); }).find("has no class sub-folders") != std::string::npos);
}

TEST_CASE("load_jsonl and load_csv: names or integers as labels", "[data]") {
  test::ScratchDir dir("text-files");
  write(dir.path / "a.jsonl", "{\"text\": \"good film\", \"label\": \"pos\"}\n\n{\"text\": \"dull\", \"label\": \"neg\"}\n");
  auto set = data::load_jsonl(dir.path / "a.jsonl");
  CHECK(set.classes == std::vector<std::string>{"neg", "pos"});
  CHECK(set.labels == std::vector<std::int64_t>{1, 0});
  CHECK(set.sources[1] == "data::load_jsonl: " + (dir.path / "a.jsonl").string() + ":3");
  write(dir.path / "b.jsonl", "{\"body\": \"x\", \"y\": 2}\n");
  set = data::load_jsonl(dir.path / "b.jsonl", {.text = "body", .label = "y"});
  CHECK(set.classes == std::vector<std::string>{"0", "1", "2"});
  write(dir.path / "bad.jsonl", "{\"text\": \"x\", \"label\": -1}\n");
  CHECK(test::message_of([&] { data::load_jsonl(dir.path / "bad.jsonl"); })
            .find("bad.jsonl:1: the label -1 is neither a class name nor an integer >= 0") != std::string::npos);
  write(dir.path / "nofield.jsonl", "{\"label\": 1}\n");
  CHECK(test::message_of([&] { data::load_jsonl(dir.path / "nofield.jsonl"); }).find("no string field 'text'") !=
        std::string::npos);

  write(dir.path / "a.csv", "id,text,label\r\n1,\"Hello, \"\"world\"\"\nsecond line\",1\n2,plain,0\n");
  set = data::load_csv(dir.path / "a.csv");
  CHECK(set.texts == std::vector<std::string>{"Hello, \"world\"\nsecond line", "plain"});
  CHECK(set.labels == std::vector<std::int64_t>{1, 0});
  write(dir.path / "short.csv", "text,label\nonly one field\n");
  CHECK(test::message_of([&] { data::load_csv(dir.path / "short.csv"); }).find("row 1: 1 fields where the header has 2") !=
        std::string::npos);
  write(dir.path / "open.csv", "text,label\n\"never closed,1\n");
  CHECK(test::message_of([&] { data::load_csv(dir.path / "open.csv"); }).find("is never closed") != std::string::npos);
  CHECK(test::message_of([&] { data::load_csv(dir.path / "a.csv", {.text = "body"}); }).find("no column 'body'") !=
        std::string::npos);
}

TEST_CASE("stratified_split: disjoint, complete, each class's share, the same for the same seed", "[data]") {
  std::vector<std::int64_t> labels;
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 10 * (c + 1); ++i) labels.push_back(c);  // 10, 20 and 30 of the three classes
  std::mt19937 rng(3);
  std::shuffle(labels.begin(), labels.end(), rng);
  const auto [train, test] = data::stratified_split(labels, 0.2, 4);
  std::set<std::int64_t> all(train.begin(), train.end());
  for (auto k : test) CHECK(all.insert(k).second);  // no position in both
  CHECK(all.size() == labels.size());
  std::vector<int> per_class(3, 0);
  for (auto k : test) ++per_class[static_cast<std::size_t>(labels[static_cast<std::size_t>(k)])];
  CHECK(per_class == std::vector<int>{2, 4, 6});
  CHECK(data::stratified_split(labels, 0.2, 4) == std::make_pair(train, test));
  CHECK(data::stratified_split(labels, 0.2, 5).second != test);
  CHECK(test::message_of([&] { data::stratified_split(labels, 1.0, 0); }).find("test_fraction must be in (0, 1), got 1") !=
        std::string::npos);
}
