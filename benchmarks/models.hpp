#pragma once
// Models the benchmarks share: the d-256 ViT of the step benchmarks, and a small pre-norm
// transformer block stack (multi-head attention and an MLP per block, mean-pooled into a
// classifier).
#include <cmath>

#include <torch/torch.h>

#include <ftopt/detail/compat.hpp>
#include <ftopt/models/bert.hpp>
#include <ftopt/models/vit.hpp>
#include <ftopt/nn/attention.hpp>

namespace ftopt::bench {

/// The step benchmarks' ViT (the "d-256 ViT" of docs/): 6 blocks, d 256, 4 heads, MLP 1024, 4x4
/// patches of 28x28 one-channel images (50 tokens), 10 labels.
inline const ftopt::models::ViTOptions vit_d256{.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 256,
                                                .layers = 6, .heads = 4, .intermediate = 1024, .num_labels = 10};

/// The main job's default ViT (apps/finetune/'s defaults): 4 blocks, d 128, 4 heads, MLP
/// 512, 4x4 patches of 28x28 (50 tokens), 5 labels.
inline const ftopt::models::ViTOptions vit_main{.image_size = 28, .patch_size = 4, .channels = 1, .hidden = 128,
                                                .layers = 4, .heads = 4, .intermediate = 512, .num_labels = 5};

/// all-MiniLM-L6-v2's architecture (its config.json: 6 layers, hidden 384, 12 heads, MLP 1536,
/// vocab 30522, dropout 0.1) as transformers' BertForSequenceClassification with 5 labels (the
/// pooler's [CLS]; the main job's mean pooling costs the same). The step benchmarks use random
/// weights: the time of a step does not depend on them.
inline const ftopt::models::BertOptions minilm{.vocab_size = 30522, .hidden = 384, .layers = 6, .heads = 12,
                                               .intermediate = 1536, .num_labels = 5};

/// A batch of `batch` random token sequences of `tokens` ids for minilm ([CLS] ... [SEP], no
/// padding: every BBC article is longer than 128 tokens) and labels.
inline std::pair<torch::Tensor, torch::Tensor> minilm_batch(std::int64_t batch = 32, std::int64_t tokens = 128) {
  auto ids = torch::randint(1000, 30000, {batch, tokens}, torch::kLong);
  ids.select(1, 0).fill_(101);
  ids.select(1, tokens - 1).fill_(102);
  return {ftopt::models::bert_input(ids, torch::ones_like(ids)), torch::randint(0, 5, {batch}, torch::kLong)};
}

struct BlockImpl : torch::nn::Module {
  BlockImpl(std::int64_t dim, std::int64_t heads)
      : heads(heads),
        norm1(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})))),
        qkv(register_module("qkv", torch::nn::Linear(dim, 3 * dim))),
        proj(register_module("proj", torch::nn::Linear(dim, dim))),
        norm2(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})))),
        fc1(register_module("fc1", torch::nn::Linear(dim, 4 * dim))),
        fc2(register_module("fc2", torch::nn::Linear(4 * dim, dim))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    auto parts = qkv(norm1(x)).view({B, T, 3, heads, C / heads}).permute({2, 0, 3, 1, 4});
    auto attended = nn::scaled_dot_product_attention(parts[0], parts[1], parts[2]);
    auto h = x + proj(attended.transpose(1, 2).reshape({B, T, C}));
    return h + fc2(torch::gelu(fc1(norm2(h))));
  }

  std::int64_t heads;
  torch::nn::LayerNorm norm1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm norm2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Block);

/// tokens [B, T, in] -> linear embedding -> blocks -> mean over T -> classes.
struct TransformerImpl : torch::nn::Module {
  TransformerImpl(std::int64_t in, std::int64_t dim, std::int64_t heads, std::int64_t depth,
                  std::int64_t classes)
      : embed(register_module("embed", torch::nn::Linear(in, dim))),
        head(register_module("head", torch::nn::Linear(dim, classes))) {
    for (std::int64_t i = 0; i < depth; ++i) blocks->push_back(Block(dim, heads));
    register_module("blocks", blocks);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto h = embed(x);
    for (auto& block : *blocks) h = block->as<BlockImpl>()->forward(h);
    return head(h.mean(1));
  }

  torch::nn::Linear embed;
  torch::nn::ModuleList blocks;
  torch::nn::Linear head;
};
TORCH_MODULE(Transformer);

} // namespace ftopt::bench
