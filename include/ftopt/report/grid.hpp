#pragma once
/// A policy grid's report as documents (the report layer: <ftopt.hpp> and the core never
/// include it): the table for a terminal, in Markdown and in JSON (nlohmann), and a
/// speed-accuracy plot in SVG: step time against accuracy, peak memory as marker size, the
/// Pareto front (no other combination both faster and more accurate) joined, and every
/// combination more than the bound below the baseline's accuracy flagged.
///
///   grid::Report report = grid::run<Grid>(...);     // grid/run.hpp
///   ftopt::report::print(report, std::cout);
///   ftopt::report::write(report, "docs/grid");      // grid.md, grid.json, grid.svg

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ftopt/detail/atomic_file.hpp>
#include <ftopt/error.hpp>
#include <ftopt/grid/report.hpp>
#include <ftopt/json.hpp>

namespace ftopt::report {

namespace detail {

/// A result's notes column: baseline, Pareto, flagged.
inline std::string notes(const grid::Report& report, const grid::Result& r) {
  std::string out;
  if (&r == &report.results.front()) out = "baseline";
  if (r.pareto) out += std::string(out.empty() ? "" : ", ") + "Pareto";
  if (r.flagged) out += std::string(out.empty() ? "" : ", ") + "FLAGGED: accuracy below the bound";
  return out;
}
/// Text for a Markdown table cell: | escaped, line breaks as spaces.
inline std::string escape_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}
/// Text for an SVG element: &, < and > escaped.
inline std::string text(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
  return out;
}
/// A number for the plot: whole above 10, else up to two decimals without trailing zeros.
inline std::string number(double v) {
  std::ostringstream out;
  out << std::setprecision(v != 0 && std::abs(v) < 10 ? 2 : 0) << std::fixed << v;
  if (std::abs(v) < 10 && v != 0) {
    std::string s = out.str();
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
  }
  return out.str();
}
/// 1-2-5 values of each decade in [lo, hi], for a log axis.
inline std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> out;
  for (double decade = std::pow(10, std::floor(std::log10(lo))); decade <= hi; decade *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * decade >= lo && m * decade <= hi) out.push_back(m * decade);
  return out;
}
/// About five round tick values in [lo, hi].
inline std::vector<double> ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double step = magnitude * (raw / magnitude >= 5 ? 5 : raw / magnitude >= 2 ? 2 : 1);
  std::vector<double> out;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-12; v += step) out.push_back(v);
  return out;
}

} // namespace detail

/// The table in Markdown: one row per combination (its measurements, or why it did not run), then
/// the excluded combinations with their rule.
inline std::string markdown(const grid::Report& report) {
  std::ostringstream out;
  out << "| precision | peft | memory | parallel | quant | step ms | samples/s | speed-up | peak MiB | trainable "
         "| accuracy | vs baseline | inference ms | |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : report.results) {
    const auto& c = r.combination;
    out << "| " << c.precision << " | " << c.peft << " | " << c.memory << " | " << c.parallel << " | " << c.quant
        << " | ";
    if (!r.ran()) {
      out << "| | | | | | | | not run: " << detail::escape_cell(r.error) << " |\n";
      continue;
    }
    out << std::fixed << std::setprecision(1) << r.step_ms << " | " << std::setprecision(0) << r.samples_per_second
        << " | " << std::setprecision(2) << report.baseline().step_ms / r.step_ms << "x | " << std::setprecision(1)
        << r.peak_mib << " | " << r.trainable << " | " << std::setprecision(2) << 100 * r.accuracy << "% | "
        << std::showpos << 100 * (r.accuracy - report.baseline().accuracy) << std::noshowpos << " | "
        << std::setprecision(1) << r.inference_ms << " | " << detail::notes(report, r) << " |\n";
  }
  for (const auto& e : report.excluded) out << "\nExcluded: " << e.combination.key() << " (" << e.rule << ")";
  if (!report.excluded.empty()) out << '\n';
  return out.str();
}

/// The same table for a terminal: aligned columns, no Markdown.
inline void print(const grid::Report& report, std::ostream& out) {
  int width = 12;
  for (const auto& r : report.results) width = std::max(width, static_cast<int>(r.combination.key().size()) + 2);
  out << std::left << std::setw(width) << "combination" << std::right << std::setw(10) << "step ms" << std::setw(10)
      << "speed-up" << std::setw(10) << "peak MiB" << std::setw(10) << "accuracy" << std::setw(9) << "vs base"
      << "  notes\n";
  for (const auto& r : report.results) {
    out << std::left << std::setw(width) << r.combination.key() << std::right;
    if (!r.ran()) {
      out << "  not run: " << r.error << '\n';
      continue;
    }
    out << std::fixed << std::setprecision(1) << std::setw(10) << r.step_ms << std::setw(9) << std::setprecision(2)
        << report.baseline().step_ms / r.step_ms << "x" << std::setw(10) << std::setprecision(1) << r.peak_mib
        << std::setw(9) << std::setprecision(2) << 100 * r.accuracy << "%" << std::setw(9) << std::showpos
        << 100 * (r.accuracy - report.baseline().accuracy) << std::noshowpos << "  " << detail::notes(report, r) << '\n';
  }
  for (const auto& e : report.excluded) out << "excluded: " << e.combination.key() << " (" << e.rule << ")\n";
}

/// The report as JSON: title, bound, each combination's measurements (or its error), the
/// excluded combinations with their rule.
inline nlohmann::json to_json(const grid::Report& report) {
  nlohmann::json results = nlohmann::json::array(), excluded = nlohmann::json::array();
  for (const auto& r : report.results) {
    const auto& c = r.combination;
    nlohmann::json row{{"precision", c.precision}, {"peft", c.peft}, {"memory", c.memory},
                       {"parallel", c.parallel}, {"quant", c.quant}};
    if (r.ran())
      row.update({{"step_ms", r.step_ms}, {"samples_per_second", r.samples_per_second}, {"peak_mib", r.peak_mib},
                  {"trainable", r.trainable}, {"accuracy", r.accuracy}, {"inference_ms", r.inference_ms},
                  {"flagged", r.flagged}, {"pareto", r.pareto}});
    else row["error"] = r.error;
    results.push_back(std::move(row));
  }
  for (const auto& e : report.excluded) excluded.push_back({{"combination", e.combination.key()}, {"rule", e.rule}});
  return {{"title", report.title}, {"bound", report.bound}, {"results", results}, {"excluded", excluded}};
}

/// The plot: x step time (ms), y accuracy (%), marker area proportional to peak memory, the
/// Pareto front joined by a line, flagged points in red, the baseline's accuracy minus the bound
/// as a dashed line.
inline std::string svg(const grid::Report& report) {
  constexpr double width = 900, height = 560, left = 80, right = 260, top = 50, bottom = 60;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  std::vector<const grid::Result*> ran;
  for (const auto& r : report.results)
    if (r.ran()) ran.push_back(&r);
  ftopt::detail::check(!ran.empty(), "report::svg: no results to plot");
  double x_lo = ran.front()->step_ms, x_hi = x_lo, y_lo = ran.front()->accuracy, y_hi = y_lo, mem_hi = 0;
  for (const auto* r : ran) {
    x_lo = std::min(x_lo, r->step_ms), x_hi = std::max(x_hi, r->step_ms);
    y_lo = std::min(y_lo, r->accuracy), y_hi = std::max(y_hi, r->accuracy);
    mem_hi = std::max(mem_hi, r->peak_mib);
  }
  const double floor = report.baseline().accuracy - report.bound;
  y_lo = std::min(y_lo, floor);
  const auto pad = [](double& lo, double& hi, double minimum) {
    const double span = std::max(hi - lo, minimum);
    lo -= 0.08 * span, hi += 0.08 * span;
  };
  // Step times that span more than 8x (emulated bf16 next to fp32) go on a log axis.
  const bool log_x = x_lo > 0 && x_hi / x_lo > 8;
  if (log_x) x_lo /= 1.15, x_hi *= 1.15;
  else pad(x_lo, x_hi, 1e-3 * std::max(1.0, x_hi)), x_lo = std::max(0.0, x_lo);
  pad(y_lo, y_hi, 0.01);
  const auto px = [&](double v) {
    const double f = log_x ? std::log(v / x_lo) / std::log(x_hi / x_lo) : (v - x_lo) / (x_hi - x_lo);
    return left + f * plot_w;
  };
  const auto py = [&](double v) { return top + (1 - (v - y_lo) / (y_hi - y_lo)) * plot_h; };
  const auto radius = [&](double mib) { return 4 + 14 * std::sqrt(mem_hi > 0 ? mib / mem_hi : 0); };

  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << left << "\" y=\"28\" font-size=\"16\" font-weight=\"bold\">" << detail::text(report.title) << "</text>\n";
  // Axes, ticks and grid lines.
  out << "<g stroke=\"#888\" stroke-width=\"1\">\n"
      << "<line x1=\"" << left << "\" y1=\"" << top + plot_h << "\" x2=\"" << left + plot_w << "\" y2=\""
      << top + plot_h << "\"/>\n<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\""
      << top + plot_h << "\"/>\n</g>\n";
  for (double v : log_x ? detail::log_ticks(x_lo, x_hi) : detail::ticks(x_lo, x_hi))
    out << "<line x1=\"" << px(v) << "\" y1=\"" << top << "\" x2=\"" << px(v) << "\" y2=\"" << top + plot_h
        << "\" stroke=\"#eee\"/>\n<text x=\"" << px(v) << "\" y=\"" << top + plot_h + 18
        << "\" text-anchor=\"middle\">" << detail::number(v) << "</text>\n";
  for (double v : detail::ticks(y_lo, y_hi))
    out << "<line x1=\"" << left << "\" y1=\"" << py(v) << "\" x2=\"" << left + plot_w << "\" y2=\"" << py(v)
        << "\" stroke=\"#eee\"/>\n<text x=\"" << left - 8 << "\" y=\"" << py(v) + 4 << "\" text-anchor=\"end\">"
        << detail::number(100 * v) << "</text>\n";
  out << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 18
      << "\" text-anchor=\"middle\">training step time (ms" << (log_x ? ", log scale" : "")
      << "), lower is faster</text>\n"
      << "<text transform=\"translate(22 " << top + plot_h / 2
      << ") rotate(-90)\" text-anchor=\"middle\">held-out accuracy (%)</text>\n";
  // The bound below the baseline.
  out << "<line x1=\"" << left << "\" y1=\"" << py(floor) << "\" x2=\"" << left + plot_w << "\" y2=\"" << py(floor)
      << "\" stroke=\"#c33\" stroke-dasharray=\"6 4\"/>\n<text x=\"" << left + plot_w / 2 << "\" y=\""
      << py(floor) + 14 << "\" text-anchor=\"middle\" fill=\"#c33\">baseline - " << detail::number(100 * report.bound)
      << " points</text>\n";
  // The Pareto front, by step time.
  std::vector<const grid::Result*> front;
  for (const auto* r : ran)
    if (r->pareto) front.push_back(r);
  std::sort(front.begin(), front.end(), [](auto* a, auto* b) { return a->step_ms < b->step_ms; });
  if (front.size() > 1) {
    out << "<polyline fill=\"none\" stroke=\"#2a7\" stroke-width=\"2\" points=\"";
    for (const auto* r : front) out << px(r->step_ms) << ',' << py(r->accuracy) << ' ';
    out << "\"/>\n";
  }
  // The points, largest first so small markers stay visible, labelled.
  std::vector<const grid::Result*> by_size = ran;
  std::sort(by_size.begin(), by_size.end(), [](auto* a, auto* b) { return a->peak_mib > b->peak_mib; });
  for (const auto* r : by_size) {
    const char* fill = r->flagged ? "#e66" : r->pareto ? "#2a7" : "#69c";
    out << "<circle cx=\"" << px(r->step_ms) << "\" cy=\"" << py(r->accuracy) << "\" r=\"" << radius(r->peak_mib)
        << "\" fill=\"" << fill << "\" fill-opacity=\"0.55\" stroke=\"#333\"><title>" << detail::text(r->combination.key())
        << ": " << detail::number(r->step_ms) << " ms, " << detail::number(100 * r->accuracy) << "%, " << detail::number(r->peak_mib)
        << " MiB</title></circle>\n";
  }
  // Numbers beside the points; one that would overlap an earlier number moves down a line.
  std::vector<std::pair<double, double>> placed;
  for (std::size_t i = 0; i < ran.size(); ++i) {
    const auto* r = ran[i];
    double x = px(r->step_ms) + radius(r->peak_mib) + 3, y = py(r->accuracy) + 4;
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto& [px0, py0] : placed)
        if (std::abs(px0 - x) < 16 && std::abs(py0 - y) < 11) y = py0 + 11, moved = true;
    }
    placed.emplace_back(x, y);
    out << "<text x=\"" << x << "\" y=\"" << y << "\" font-size=\"10\">" << i + 1 << "</text>\n";
  }
  // Legend: numbers to combinations, colours, marker size.
  double y = top;
  out << "<g font-size=\"11\">\n";
  for (std::size_t i = 0; i < ran.size(); ++i, y += 15)
    out << "<text x=\"" << width - right + 16 << "\" y=\"" << y << "\">" << i + 1 << ". "
        << detail::text(ran[i]->combination.label()) << "</text>\n";
  y += 10;
  out << "<circle cx=\"" << width - right + 22 << "\" cy=\"" << y << "\" r=\"6\" fill=\"#2a7\" fill-opacity=\"0.55\" "
      << "stroke=\"#333\"/><text x=\"" << width - right + 34 << "\" y=\"" << y + 4 << "\">Pareto front</text>\n";
  y += 18;
  out << "<circle cx=\"" << width - right + 22 << "\" cy=\"" << y << "\" r=\"6\" fill=\"#e66\" fill-opacity=\"0.55\" "
      << "stroke=\"#333\"/><text x=\"" << width - right + 34 << "\" y=\"" << y + 4 << "\">below the bound</text>\n";
  y += 18;
  out << "<text x=\"" << width - right + 16 << "\" y=\"" << y + 4 << "\">marker area: peak memory (max "
      << detail::number(mem_hi) << " MiB)</text>\n</g>\n</svg>\n";
  return out.str();
}

/// Writes `<stem>.md`, `<stem>.json` and `<stem>.svg` under `dir`, each atomically.
inline void write(const grid::Report& report, const std::filesystem::path& dir, const std::string& stem = "grid") {
  std::filesystem::create_directories(dir);
  for (const auto& file : {std::pair{".md", markdown(report)}, {".json", to_json(report).dump(2) + "\n"}, {".svg", svg(report)}})
    ftopt::detail::write_atomically(dir / (stem + file.first), "report::write",
                                    [&](std::ostream& out) { out << file.second; });
}

} // namespace ftopt::report
