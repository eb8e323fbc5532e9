// report/grid.hpp: a policy grid's report as documents: the Markdown and terminal tables, JSON
// (read back with nlohmann), a well-formed SVG plot, and the three files written. The marks
// themselves (flags, Pareto front, the choice) are tests/grid/grid.cpp's.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ftopt/grid/report.hpp>
#include <ftopt/report/grid.hpp>

#include "../grid/sample_report.hpp"
#include "../support.hpp"

using namespace ftopt;
using Catch::Matchers::Contains;

namespace report_test {

/// Whether `text` is well-formed XML as far as an SVG needs: every tag closed in order, every
/// attribute value quoted, no bare '&' or '<' in text.
bool well_formed_xml(const std::string& text) {
  std::vector<std::string> open;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '&') {
      const auto semi = text.find(';', i);
      if (semi == std::string::npos || semi - i > 6) return false;
      i = semi + 1;
      continue;
    }
    if (text[i] != '<') {
      ++i;
      continue;
    }
    const auto close = text.find('>', i);
    if (close == std::string::npos) return false;
    std::string tag = text.substr(i + 1, close - i - 1);
    i = close + 1;
    if (tag.starts_with("?")) continue;
    if (tag.find('<') != std::string::npos) return false;
    std::size_t quotes = 0;
    for (char c : tag) quotes += c == '"';
    if (quotes % 2 != 0) return false;
    if (tag.starts_with("/")) {
      if (open.empty() || open.back() != tag.substr(1)) return false;
      open.pop_back();
    } else if (!tag.ends_with("/")) {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
  }
  return open.empty();
}

} // namespace report_test

using namespace report_test;

TEST_CASE("report: Markdown and terminal tables of a grid report", "[report]") {
  const auto report = test::sample_report();
  const std::string md = ftopt::report::markdown(report);
  CHECK_THAT(md, Contains("| fp32 | lora | none | single | none | 6.0 | 0 | 1.67x | 20.0 | 0 | 89.70% | -0.30 |"));
  CHECK_THAT(md, Contains("| fp32 | full | none | single | none | 10.0 |"));
  CHECK_THAT(md, Contains("baseline, Pareto"));
  CHECK_THAT(md, Contains("FLAGGED: accuracy below the bound"));
  CHECK_THAT(md, Contains("not run: refused \\| badly"));
  CHECK_THAT(md, Contains("Excluded: fp16/full/none/single/qat (fake-quant training cannot run under fp16"));
  std::ostringstream terminal;
  ftopt::report::print(report, terminal);
  CHECK_THAT(terminal.str(), Contains("fp32/lora/none/single/none"));
  CHECK_THAT(terminal.str(), Contains("not run: refused | badly"));
  CHECK_THAT(terminal.str(), Contains("excluded: fp16/full/none/single/qat"));
}

TEST_CASE("report: JSON that reads back with every measurement, error and exclusion", "[report]") {
  const auto report = test::sample_report();
  const auto json = nlohmann::json::parse(ftopt::report::to_json(report).dump());
  CHECK(json["bound"].get<double>() == 0.005);
  CHECK(json["title"] == "ftopt policy grid");
  REQUIRE(json["results"].size() == 6);
  const auto& lora = json["results"][1];
  CHECK(lora["peft"] == "lora");
  CHECK(lora["step_ms"].get<double>() == 6);
  CHECK(lora["accuracy"].get<double>() == 0.897);
  CHECK(lora["pareto"] == true);
  CHECK(lora["flagged"] == false);
  CHECK(json["results"][2]["flagged"] == true);  // adapter: 1 point down
  CHECK(json["results"][5]["error"] == "refused | badly");
  CHECK_FALSE(json["results"][5].contains("step_ms"));
  REQUIRE(json["excluded"].size() == 1);
  CHECK(json["excluded"][0]["combination"] == "fp16/full/none/single/qat");
}

TEST_CASE("report: a well-formed SVG plot, and the three files written", "[report]") {
  auto report = test::sample_report();
  report.title = "grid <test> & more";
  const std::string svg = ftopt::report::svg(report);
  CHECK(well_formed_xml(svg));
  CHECK_FALSE(well_formed_xml("<svg><g></svg>"));  // the checker can fail
  CHECK_THAT(svg, Contains("grid &lt;test&gt; &amp; more"));
  CHECK_THAT(svg, Contains("<polyline"));  // the front: full, lora, prefix
  std::size_t circles = 0;
  for (auto at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++circles;
  CHECK(circles == 5 + 2);  // the results that ran, and two in the legend
  CHECK_THAT(test::message_of([] { ftopt::report::svg(grid::Report{}); }), Contains("no results to plot"));

  test::ScratchDir dir("grid-report");
  ftopt::report::write(report, dir.path);
  for (const char* file : {"grid.md", "grid.json", "grid.svg"}) CHECK(std::filesystem::exists(dir.path / file));
  std::ifstream written(dir.path / "grid.json");
  CHECK(nlohmann::json::parse(written)["results"].size() == 6);
}
