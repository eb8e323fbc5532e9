#pragma once
/// data::TextSet: labelled texts, read from the layouts text corpora ship in, and split.
///   - load_text_folder(root): one sub-folder per class, one text per file (BBC News, 20
///     Newsgroups, sklearn's load_files); classes are the sub-folders in sorted order;
///   - load_jsonl(path, {.text = "text", .label = "label"}): one JSON object per line;
///   - load_csv(path, {.text = "text", .label = "label"}): RFC 4180 (a header row, quoted fields
///     with "" inside, commas and line breaks in quotes);
///   - stratified_split(set.labels, 0.2, seed): train and test positions with each class's share
///     kept in both (a fixed permutation per class: the same seed gives the same split).
/// Labels are class indices into `classes`: a label column of names gets the names' sorted order;
/// one of integers is taken as given (classes "0", "1", ... up to the largest).
/// Text must be UTF-8. Utf8Errors::Strict (the default) throws, naming the file, the line and the
/// byte offset; Utf8Errors::Replace turns each bad byte into U+FFFD, as Python's
/// errors="replace", and counts the texts it repaired in `replaced`.
///
///   auto bbc = ftopt::data::load_text_folder(root, {.errors = ftopt::data::Utf8Errors::Replace});
///   auto [train, test] = ftopt::data::stratified_split(bbc.labels, 0.2, /*seed=*/0);

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <ftopt/detail/json.hpp>
#include <ftopt/error.hpp>
#include <ftopt/text/unicode.hpp>

namespace ftopt::data {

enum class Utf8Errors { Strict, Replace };

struct TextSet {
  std::vector<std::string> texts;
  std::vector<std::int64_t> labels;     ///< class indices into `classes`
  std::vector<std::string> classes;
  std::vector<std::string> sources;     ///< where each text came from (file, or file:line)
  std::int64_t replaced = 0;            ///< texts whose bad UTF-8 was replaced (Utf8Errors::Replace)

  std::int64_t size() const { return static_cast<std::int64_t>(texts.size()); }
  /// The texts at `positions`, in that order.
  TextSet subset(const std::vector<std::int64_t>& positions) const {
    TextSet out{.classes = classes};
    for (const auto k : positions) {
      check(k >= 0 && k < size(), "TextSet::subset: position ", k, " is outside 0..", size() - 1);
      const auto i = static_cast<std::size_t>(k);
      out.texts.push_back(texts[i]);
      out.labels.push_back(labels[i]);
      out.sources.push_back(sources[i]);
    }
    return out;
  }
};

struct TextFolderOptions {
  Utf8Errors errors = Utf8Errors::Strict;
  std::vector<std::string> extensions = {".txt"};  ///< files with these endings count; empty: every file
};

struct TextColumns {
  std::string text = "text";
  std::string label = "label";
  Utf8Errors errors = Utf8Errors::Strict;
};

namespace detail {

/// `bytes` as valid UTF-8: unchanged when it is; else an error naming `source` (Strict) or each
/// bad byte replaced by U+FFFD (Replace; `replaced` set).
inline std::string valid_utf8(std::string bytes, Utf8Errors errors, std::string_view source, bool& replaced) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    const std::size_t at = i;
    if (text::next_code_point(bytes, i) != static_cast<char32_t>(-1)) continue;
    if (errors == Utf8Errors::Strict) text::fail_utf8(bytes, at, source);
    replaced = true;
    bytes.replace(at, 1, "\xEF\xBF\xBD");
    i = at + 3;
  }
  return bytes;
}

inline std::string read_bytes(const std::filesystem::path& path, std::string_view who) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), who, ": cannot read ", path.string());
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

/// Labels from their values in the file: names (sorted into classes) or integers >= 0.
class LabelTable {
public:
  void add_name(std::string name) { names_.push_back(std::move(name)); }
  void add_index(std::int64_t index) { indices_.push_back(index); }
  void finish(TextSet& set, std::string_view where) const {
    check(names_.empty() || indices_.empty(), where, ": the label column mixes names and integers");
    if (!names_.empty()) {
      std::set<std::string> sorted(names_.begin(), names_.end());
      set.classes.assign(sorted.begin(), sorted.end());
      for (const auto& n : names_)
        set.labels.push_back(std::distance(sorted.begin(), sorted.find(n)));
    } else {
      std::int64_t top = -1;
      for (auto i : indices_) top = std::max(top, i);
      check(top < (1 << 20), where, ": the label ", top, " is too large for a class index (integer labels are "
            "classes 0, 1, ...; write class names instead)");
      for (std::int64_t c = 0; c <= top; ++c) set.classes.push_back(std::to_string(c));
      set.labels = indices_;
    }
  }

private:
  std::vector<std::string> names_;
  std::vector<std::int64_t> indices_;
};

} // namespace detail

/// Every file under `root`/<class>/ (recursively, sorted by path) as one text of that class.
inline TextSet load_text_folder(const std::filesystem::path& root, const TextFolderOptions& options = {}) {
  namespace fs = std::filesystem;
  const std::string who = "data::load_text_folder";
  check(fs::is_directory(root), who, ": ", root.string(), " is not a folder");
  TextSet set;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && !entry.path().filename().string().starts_with(".") &&
        !entry.path().filename().string().starts_with("__"))
      set.classes.push_back(entry.path().filename().string());
  std::sort(set.classes.begin(), set.classes.end());
  check(!set.classes.empty(), who, ": ", root.string(), " has no class sub-folders (expected root/<class>/<text>.txt)");
  auto wanted = [&](const fs::path& p) {
    if (options.extensions.empty()) return true;
    return std::find(options.extensions.begin(), options.extensions.end(), p.extension().string()) !=
           options.extensions.end();
  };
  for (std::size_t c = 0; c < set.classes.size(); ++c) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(root / set.classes[c]))
      if (entry.is_regular_file() && wanted(entry.path())) files.push_back(entry.path());
    check(!files.empty(), who, ": class folder ", (root / set.classes[c]).string(), " has no text files",
          options.extensions.empty() ? "" : " (of the extensions asked for)");
    std::sort(files.begin(), files.end());
    for (const auto& path : files) {
      bool replaced = false;
      set.texts.push_back(detail::valid_utf8(detail::read_bytes(path, who), options.errors, path.string(), replaced));
      set.replaced += replaced;
      set.labels.push_back(static_cast<std::int64_t>(c));
      set.sources.push_back(path.string());
    }
  }
  return set;
}

/// One JSON object per line with a string field `columns.text` and a label field
/// `columns.label` (a class name or an integer >= 0). Blank lines are skipped.
template <class Json = nlohmann::json>
TextSet load_jsonl(const std::filesystem::path& path, const TextColumns& columns = {}) {
  static_assert(ftopt::detail::JsonIncluded<Json>::value);
  const std::string who = "data::load_jsonl: " + path.string();
  check(std::filesystem::is_regular_file(path), who, ": no such file");
  std::ifstream in(path, std::ios::binary);
  TextSet set;
  detail::LabelTable labels;
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = who + ":" + std::to_string(number);
    bool replaced = false;
    line = detail::valid_utf8(std::move(line), columns.errors, where, replaced);
    Json row;
    try {
      row = Json::parse(line);
    } catch (const typename Json::exception& e) {
      fail(where, ": not a JSON object (", e.what(), ")");
    }
    check(row.is_object() && row.contains(columns.text) && row[columns.text].is_string(), where,
          ": no string field '", columns.text, "'");
    check(row.contains(columns.label), where, ": no field '", columns.label, "'");
    const Json& label = row[columns.label];
    if (label.is_string()) labels.add_name(label.template get<std::string>());
    else if (label.is_number_integer() && label.template get<std::int64_t>() >= 0)
      labels.add_index(label.template get<std::int64_t>());
    else fail(where, ": the label ", label.dump(), " is neither a class name nor an integer >= 0");
    set.texts.push_back(row[columns.text].template get<std::string>());
    set.sources.push_back(where);
    set.replaced += replaced;
  }
  check(!set.texts.empty(), who, ": the file holds no rows");
  labels.finish(set, who);
  return set;
}

/// A CSV file with a header row naming `columns.text` and `columns.label` (RFC 4180 quoting).
inline TextSet load_csv(const std::filesystem::path& path, const TextColumns& columns = {}) {
  const std::string who = "data::load_csv: " + path.string();
  check(std::filesystem::is_regular_file(path), who, ": no such file");
  bool replaced_any = false;
  const std::string bytes = detail::valid_utf8(detail::read_bytes(path, who), columns.errors, who, replaced_any);
  // Records of fields; a quoted field may hold commas, quotes ("") and line breaks.
  std::vector<std::vector<std::string>> records(1);
  std::vector<std::int64_t> lines = {1};
  std::string field;
  bool quoted = false, was_quoted = false;
  std::int64_t line = 1;
  auto end_field = [&] {
    records.back().push_back(std::move(field));
    field.clear();
    was_quoted = false;
  };
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (quoted) {
      if (c == '"' && i + 1 < bytes.size() && bytes[i + 1] == '"') field += '"', ++i;
      else if (c == '"') quoted = false;
      else {
        line += c == '\n';
        field += c;
      }
    } else if (c == '"') {
      check(field.empty() && !was_quoted, who, ":", line, ": a quote inside an unquoted field");
      quoted = was_quoted = true;
    } else if (c == ',') {
      end_field();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < bytes.size() && bytes[i + 1] == '\n') ++i;
      end_field();
      ++line;
      records.emplace_back();
      lines.push_back(line);
    } else {
      field += c;
    }
  }
  check(!quoted, who, ": a quoted field opened on or before line ", line, " is never closed");
  if (!field.empty() || was_quoted || !records.back().empty()) end_field();
  std::erase_if(records, [](const std::vector<std::string>& r) { return r.empty() || (r.size() == 1 && r[0].empty()); });
  check(!records.empty(), who, ": the file is empty");
  const auto& header = records.front();
  auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    check(it != header.end(), who, ": the header has no column '", name, "'");
    return static_cast<std::size_t>(it - header.begin());
  };
  const std::size_t text_at = column(columns.text), label_at = column(columns.label);
  TextSet set;
  detail::LabelTable labels;
  bool all_integers = true;
  for (std::size_t r = 1; r < records.size(); ++r)
    all_integers = all_integers && records[r].size() > label_at && !records[r][label_at].empty() &&
                   records[r][label_at].find_first_not_of("0123456789") == std::string::npos;
  for (std::size_t r = 1; r < records.size(); ++r) {
    const auto& record = records[r];
    const std::string where = who + ": row " + std::to_string(r);
    check(record.size() == header.size(), where, ": ", record.size(), " fields where the header has ", header.size());
    if (all_integers) {
      std::int64_t label = 0;
      const auto& text = record[label_at];
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), label);
      check(error == std::errc() && end == text.data() + text.size(), where, ": the label '", text, "' is out of range");
      labels.add_index(label);
    }
    else labels.add_name(record[label_at]);
    set.texts.push_back(record[text_at]);
    set.sources.push_back(where);
  }
  check(!set.texts.empty(), who, ": the file has a header and no rows");
  set.replaced = replaced_any;
  labels.finish(set, who);
  return set;
}

/// Train and test positions: each class's positions in a permutation drawn from `seed`, the
/// first round(n_c * test_fraction) of them to test (at least one of a class with two or more),
/// the rest to train; both lists sorted.
inline std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> stratified_split(
    const std::vector<std::int64_t>& labels, double test_fraction, std::uint64_t seed) {
  check(test_fraction > 0 && test_fraction < 1, "data::stratified_split: test_fraction must be in (0, 1), got ",
        test_fraction);
  std::map<std::int64_t, std::vector<std::int64_t>> by_class;
  for (std::size_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(static_cast<std::int64_t>(i));
  std::vector<std::int64_t> train, test;
  for (auto& [label, positions] : by_class) {
    // Fisher-Yates with the 64-bit Mersenne Twister, written out: std::shuffle's draws are the
    // standard library's choice, and a split must not change with it.
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(label));
    for (std::size_t i = positions.size(); i > 1; --i) std::swap(positions[i - 1], positions[rng() % i]);
    auto n_test = static_cast<std::size_t>(std::llround(static_cast<double>(positions.size()) * test_fraction));
    if (positions.size() >= 2) n_test = std::clamp<std::size_t>(n_test, 1, positions.size() - 1);
    test.insert(test.end(), positions.begin(), positions.begin() + static_cast<std::ptrdiff_t>(n_test));
    train.insert(train.end(), positions.begin() + static_cast<std::ptrdiff_t>(n_test), positions.end());
  }
  std::sort(train.begin(), train.end());
  std::sort(test.begin(), test.end());
  return {train, test};
}

} // namespace ftopt::data
