#pragma once
// A tiny BERT for the tests of models/bert.hpp and models/bert_pretrained.hpp: weights of size ~1,
// so that every difference shows in the logits.
#include <cstdint>

#include <torch/torch.h>

#include <ftopt/models/bert.hpp>

namespace ftopt::test {

inline models::BertOptions tiny_options(models::BertPooling pooling = models::BertPooling::Pooler) {
  return {.vocab_size = 50, .hidden = 16, .layers = 2, .heads = 4, .intermediate = 32, .dropout = 0.0,
          .attention_dropout = 0.0, .max_position_embeddings = 24, .initializer_range = 0.5, .num_labels = 3,
          .pooling = pooling};  // weights of size ~1, so that every difference shows in the logits
}
inline models::Bert tiny_bert(models::BertPooling pooling = models::BertPooling::Pooler, std::uint64_t seed = 5) {
  torch::manual_seed(seed);
  models::Bert bert(tiny_options(pooling));
  bert->eval();
  return bert;
}

} // namespace ftopt::test
