#pragma once
/// Sequence packing for causal language models: several token sequences (documents) share one
/// row of a batch instead of each taking a row padded to the longest. Each row carries, beside
/// the ids, an attention mask and position ids that start again at 0 for every document, the
/// layout transformers reads as packed (its DataCollatorWithFlattening writes the position ids;
/// masking_utils.find_packed_sequence_indices splits a row where a position does not follow the
/// one before by 1). models::Llama given [B, 3, T] (ids, attention_mask, position_ids) attends
/// only within each document and rotates each by its own positions, so a packed row computes
/// what the documents would alone. The first label of every document is -100: the token before
/// it belongs to another document (the separator DataCollatorWithFlattening puts there), and a
/// document's first label is never predicted unpacked either, so the loss has the same terms.
///
///   std::vector<ftopt::data::TokenSequence> docs = ...;  // ids, and labels (-100: no loss)
///   auto packed = ftopt::data::pack_sequences(docs, {.length = 512, .pad_id = 2});
///   auto logits = model(packed.input);                  // input [rows, 3, 512]
///   auto loss = ftopt::loss::causal_lm(logits, packed.labels);
///
/// Documents go to the first row with room for them, in the order given (first fit); the end of
/// a row is padding (attention_mask 0, labels -100, positions counting on from 0 as a document
/// of its own). A document longer than a row, or labels of another length than its ids, is an
/// error naming the document.

#include <cstdint>
#include <span>
#include <vector>

#include <ATen/ATen.h>

#include <ftopt/error.hpp>

namespace ftopt::data {

/// One document: token ids and the labels of the loss (-100 where nothing is predicted).
struct TokenSequence {
  std::vector<std::int64_t> ids, labels;
};

struct PackingOptions {
  std::int64_t length = 512;  ///< tokens per row
  std::int64_t pad_id = 0;    ///< the id of the padding at the end of a row
};

/// Rows of packed documents.
struct PackedSequences {
  at::Tensor input;   ///< [rows, 3, length]: ids, attention_mask (1 on documents), position_ids
  at::Tensor labels;  ///< [rows, length]: -100 on padding and on each document's first token
  std::int64_t tokens = 0;  ///< document tokens (the rest of rows * length is padding)
  /// The share of the rows' tokens that belong to documents.
  double fill() const { return input.defined() ? static_cast<double>(tokens) / static_cast<double>(input.size(0) * input.size(2)) : 0.0; }
};

inline PackedSequences pack_sequences(std::span<const TokenSequence> docs, const PackingOptions& options) {
  check(options.length >= 1, "data::pack_sequences: length must be >= 1, got ", options.length);
  constexpr std::int64_t no_label = -100;
  std::vector<std::int64_t> used;               // tokens taken in each row
  std::vector<std::vector<std::size_t>> rows;   // the documents of each row
  std::int64_t tokens = 0;
  for (std::size_t d = 0; d < docs.size(); ++d) {
    const auto n = static_cast<std::int64_t>(docs[d].ids.size());
    check(docs[d].labels.size() == docs[d].ids.size(), "data::pack_sequences: document ", d, " has ",
          docs[d].ids.size(), " ids and ", docs[d].labels.size(), " labels");
    check(n <= options.length, "data::pack_sequences: document ", d, " has ", n, " tokens, more than a row's ",
          options.length);
    if (n == 0) continue;
    std::size_t r = 0;
    while (r < rows.size() && used[r] + n > options.length) ++r;
    if (r == rows.size()) {
      rows.emplace_back();
      used.push_back(0);
    }
    rows[r].push_back(d);
    used[r] += n;
    tokens += n;
  }
  const auto R = static_cast<std::int64_t>(rows.size()), L = options.length;
  at::Tensor input = at::empty({R, 3, L}, at::kLong), labels = at::full({R, L}, no_label, at::kLong);
  auto in = input.accessor<std::int64_t, 3>();
  auto lab = labels.accessor<std::int64_t, 2>();
  for (std::int64_t r = 0; r < R; ++r) {
    std::int64_t at = 0;
    for (const auto d : rows[static_cast<std::size_t>(r)]) {
      const auto& doc = docs[d];
      for (std::size_t i = 0; i < doc.ids.size(); ++i, ++at) {
        in[r][0][at] = doc.ids[i];
        in[r][1][at] = 1;
        in[r][2][at] = static_cast<std::int64_t>(i);
        lab[r][at] = i == 0 ? no_label : doc.labels[i];
      }
    }
    for (std::int64_t p = 0; at < L; ++at, ++p) {
      in[r][0][at] = options.pad_id;
      in[r][1][at] = 0;
      in[r][2][at] = p;
    }
  }
  return {input, labels, tokens};
}

} // namespace ftopt::data
