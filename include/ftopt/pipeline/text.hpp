#pragma once
/// Text in the Pipeline: a source of labelled texts, tokenize(), and pad_batch() (dynamic
/// padding to each batch's longest sequence).
///
///   auto tokenizer = ftopt::text::BertTokenizer::from_pretrained(model_dir);
///   auto train = from(bbc.subset(train_positions)) | shuffle(seed) |
///                tokenize(tokenizer, {.max_length = 128}) | pad_batch(32, tokenizer.pad_id()) | prefetch(1);
///
/// from(TextSet): sample k is (text k, label k) (pipeline::Text).
/// tokenize(tokenizer, options): a Text becomes a Sample of int64 ids [L] ([CLS] ... [SEP],
/// truncated to options.max_length) and its label; on the workers when prefetched.
/// pad_batch(n, pad_id): n samples of any lengths become one batch: input [n, 2, T] int64 (token
/// ids padded with pad_id, and the attention mask: 1 on tokens, 0 on padding) with T the batch's
/// longest sequence, and targets [n]: the input models::Bert takes. A batch of short texts
/// costs only its own length (transformers' DataCollatorWithPadding).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include <ftopt/data/text_set.hpp>
#include <ftopt/error.hpp>
#include <ftopt/pipeline/order.hpp>
#include <ftopt/pipeline/stage.hpp>
#include <ftopt/text/bert_tokenizer.hpp>

namespace ftopt::pipeline {

/// Texts and labels in memory (a data::TextSet).
class Texts : public detail::IndexedRange<Texts> {
public:
  static constexpr Kind kind = Kind::Texts;
  static constexpr Place place = Place::Host;
  static constexpr bool indexed = true;

  Texts() = default;
  explicit Texts(data::TextSet set) : set_(std::make_shared<const data::TextSet>(std::move(set))) {
    check(set_->texts.size() == set_->labels.size(), "pipeline::Texts: ", set_->texts.size(), " texts but ",
          set_->labels.size(), " labels");
  }
  std::int64_t size() const { return set_ ? set_->size() : 0; }
  Text at(std::int64_t k) const {
    const auto i = static_cast<std::size_t>(k);
    return {set_->texts[i], set_->labels[i]};
  }
  std::int64_t key(std::int64_t k) const { return k; }
  void prepare_pass(std::uint64_t) {}
  std::shared_ptr<Stats> stats() const { return stats_; }
  const data::TextSet& set() const { return *set_; }

private:
  std::shared_ptr<const data::TextSet> set_;
  std::shared_ptr<Stats> stats_ = std::make_shared<Stats>();
};

/// Samples from labelled texts.
inline Texts from(data::TextSet set) { return Texts(std::move(set)); }

namespace detail {

template <class Up>
class Tokenized : public Over<Up, Tokenized<Up>> {
public:
  static constexpr Kind kind = Kind::Samples;

  Tokenized() = default;
  Tokenized(Up up, std::shared_ptr<const text::BertTokenizer> tokenizer, text::EncodeOptions options)
      : Over<Up, Tokenized<Up>>(std::move(up)), tokenizer_(std::move(tokenizer)), options_(options) {}
  Sample at(std::int64_t k) const {
    Text t = this->up_.at(k);
    const auto ids = tokenizer_->encode(t.text, options_);
    at::Tensor data = at::empty({static_cast<std::int64_t>(ids.size())}, at::kLong);
    std::copy(ids.begin(), ids.end(), data.data_ptr<std::int64_t>());
    return {data, at::scalar_tensor(t.label, at::kLong)};
  }

private:
  std::shared_ptr<const text::BertTokenizer> tokenizer_;
  text::EncodeOptions options_;
};

template <class Up>
class PadBatched : public Over<Up, PadBatched<Up>> {
public:
  static constexpr Kind kind = Kind::Batches;

  PadBatched() = default;
  PadBatched(Up up, std::int64_t size, std::int64_t pad_id, bool drop_last)
      : Over<Up, PadBatched<Up>>(std::move(up)), batch_(size), pad_(pad_id), drop_last_(drop_last) {
    check(size >= 1, "pipeline::pad_batch: the batch size must be >= 1, got ", size);
  }
  std::int64_t size() const {
    const std::int64_t n = this->up_.size();
    return drop_last_ ? n / batch_ : (n + batch_ - 1) / batch_;
  }
  Batch at(std::int64_t k) const {
    const std::int64_t begin = k * batch_, end = std::min(begin + batch_, this->up_.size());
    std::vector<Sample> samples;
    samples.reserve(static_cast<std::size_t>(end - begin));
    std::int64_t T = 1;
    for (std::int64_t i = begin; i < end; ++i) {
      samples.push_back(this->up_.at(i));
      const auto& d = samples.back().data;
      check(d.dim() == 1 && d.scalar_type() == at::kLong, "pipeline::pad_batch: takes token ids (int64 [L]), got ",
            d.sizes(), " ", at::toString(d.scalar_type()), "; put tokenize() before it");
      T = std::max(T, d.size(0));
    }
    const auto B = static_cast<std::int64_t>(samples.size());
    at::Tensor input = at::zeros({B, 2, T}, at::kLong);
    input.select(1, 0).fill_(pad_);
    std::vector<at::Tensor> targets;
    targets.reserve(samples.size());
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& d = samples[static_cast<std::size_t>(b)].data;
      const auto L = d.size(0);
      input[b][0].narrow(0, 0, L).copy_(d);
      input[b][1].narrow(0, 0, L).fill_(1);
      targets.push_back(samples[static_cast<std::size_t>(b)].target);
    }
    auto stats = this->stats();
    stats->samples += B;
    ++stats->batches;
    return {input, at::stack(targets)};
  }

private:
  std::int64_t batch_ = 1, pad_ = 0;
  bool drop_last_ = false;
};

} // namespace detail

/// Token ids for each text (on the workers, when prefetched). The tokenizer is copied once and
/// shared by every copy of the stage.
inline auto tokenize(const text::BertTokenizer& tokenizer, text::EncodeOptions options = {}) {
  auto shared = std::make_shared<const text::BertTokenizer>(tokenizer);
  return detail::adaptor([shared, options]<class R>(R&& range) {
    using Up = detail::Held<R>;
    static_assert(detail::Traits<Up>::kind == Kind::Texts, "ftopt::pipeline: tokenize() takes texts: put it right "
                                                           "after a Texts source (and its shuffle/shard)");
    static_assert(detail::Traits<Up>::indexed, "ftopt::pipeline: tokenize() works by index, on the workers: put it "
                                               "before prefetch() and before any range view");
    return detail::Tokenized<Up>(detail::hold(std::forward<R>(range)), shared, options);
  });
}

/// Batches of `size` token sequences padded to the batch's longest (input [B, 2, T]: ids, mask).
inline auto pad_batch(std::int64_t size, std::int64_t pad_id = 0, bool drop_last = false) {
  return detail::adaptor([size, pad_id, drop_last]<class R>(R&& range) {
    using Up = detail::Held<R>;
    static_assert(detail::Traits<Up>::kind == Kind::Samples, "ftopt::pipeline: pad_batch() takes token sequences: "
                                                             "put tokenize() before it");
    static_assert(detail::Traits<Up>::indexed, "ftopt::pipeline: pad_batch() computes batches by index, on the "
                                               "workers: put it before prefetch() and before any range view");
    return detail::PadBatched<Up>(detail::hold(std::forward<R>(range)), size, pad_id, drop_last);
  });
}

} // namespace ftopt::pipeline
