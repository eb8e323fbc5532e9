#pragma once
/// ftopt: compile-time assembled fine-tuning loops for LibTorch. Every public header, in one
/// include, in the order a reader meets them: the foundations, the Trainer and its settings,
/// the five axes (each: its concept, its policies, then their support and file headers), the
/// layers and models the policies act on, weights and data, and the tools around training.
///
/// Six headers are left out because they compile large external code into every TU that
/// includes them, and only some source files need them (docs/build.md, "Compile time"):
/// <ftopt/json.hpp> (nlohmann's JSON, for each source file that reads or writes files; the file
/// functions say so when it is missing); <ftopt/pipeline.hpp> (the data Pipeline, its own
/// umbrella, on range-v3 and TurboJPEG); <ftopt/parallel/ddp.hpp> (parallel::Ddp and the Group
/// it joins, on c10d's process groups and Reducer, for each source file that names them; a
/// Trainer over Ddp says so when it is missing); <ftopt/parallel/gloo.hpp> and
/// <ftopt/parallel/nccl.hpp> (c10d's process-group backends, in one source file of a program
/// that runs DDP; joining a group says so; each includes ddp.hpp); <ftopt/report/grid.hpp> (the
/// report layer: a policy grid's report as tables, JSON and an SVG plot; the core never
/// includes it).

// Foundations: errors, the version, what a policy and a model are, the machine.
#include <ftopt/error.hpp>
#include <ftopt/version.hpp>
#include <ftopt/axis.hpp>
#include <ftopt/model.hpp>
#include <ftopt/batch.hpp>
#include <ftopt/hardware.hpp>
#include <ftopt/detail/compat.hpp>
#include <ftopt/detail/autograd.hpp>
#include <ftopt/kernel_options.hpp>

// The Trainer: its core, its settings, what it reports, and the homes of its parts.
#include <ftopt/trainer.hpp>
#include <ftopt/trainer_options.hpp>
#include <ftopt/state.hpp>
#include <ftopt/rules.hpp>
#include <ftopt/trainer/checkpoint.hpp>
#include <ftopt/trainer/checks.hpp>
#include <ftopt/trainer/epoch.hpp>
#include <ftopt/trainer/learning_rate.hpp>
#include <ftopt/trainer/metrics.hpp>
#include <ftopt/trainer/parameter_groups.hpp>
#include <ftopt/trainer/stepping.hpp>
#include <ftopt/callbacks/callback.hpp>
#include <ftopt/callbacks/progress_bar.hpp>
#include <ftopt/callbacks/profile.hpp>
#include <ftopt/schedule/concept.hpp>
#include <ftopt/schedule/warmup_cosine.hpp>
#include <ftopt/schedule/warmup_linear.hpp>
#include <ftopt/schedule/constant_with_warmup.hpp>
#include <ftopt/schedule/step_decay.hpp>
#include <ftopt/optim/fused_adamw.hpp>
#include <ftopt/optim/adamw8bit.hpp>
#include <ftopt/detail/optimizer_closure.hpp>

// Precision.
#include <ftopt/precision/concept.hpp>
#include <ftopt/precision/fp32.hpp>
#include <ftopt/precision/bf16_mixed.hpp>
#include <ftopt/precision/fp16_mixed.hpp>
#include <ftopt/precision/bf16_true.hpp>
#include <ftopt/detail/device_of.hpp>
#include <ftopt/precision/support/grad_scaler.hpp>
#include <ftopt/precision/support/unscaled.hpp>

// Peft.
#include <ftopt/peft/concept.hpp>
#include <ftopt/peft/full.hpp>
#include <ftopt/peft/freeze.hpp>
#include <ftopt/peft/lora.hpp>
#include <ftopt/peft/adapter.hpp>
#include <ftopt/peft/prefix.hpp>
#include <ftopt/peft/ia3.hpp>
#include <ftopt/peft/vera.hpp>
#include <ftopt/peft/qlora.hpp>
#include <ftopt/peft/kernel/adapter_linears.hpp>
#include <ftopt/peft/kernel/adapted.hpp>
#include <ftopt/storage/packed.hpp>
#include <ftopt/storage/int8_per_channel.hpp>
#include <ftopt/storage/nf4.hpp>
#include <ftopt/peft/support/lora_branch.hpp>
#include <ftopt/peft/support/targets.hpp>
#include <ftopt/peft/support/report.hpp>
#include <ftopt/peft/files/names.hpp>
#include <ftopt/peft/files/adapter.hpp>
#include <ftopt/peft/files/lora.hpp>
#include <ftopt/peft/files/ia3.hpp>
#include <ftopt/peft/files/vera.hpp>

// Memory.
#include <ftopt/memory/concept.hpp>
#include <ftopt/memory/none.hpp>
#include <ftopt/memory/checkpoint.hpp>
#include <ftopt/memory/optimizer_in_backward.hpp>
#include <ftopt/memory/support/peak.hpp>

// Parallel.
#include <ftopt/parallel/concept.hpp>
#include <ftopt/parallel/single.hpp>
#include <ftopt/parallel/support/environment.hpp>
#include <ftopt/parallel/support/launch.hpp>

// Quant.
#include <ftopt/quant/concept.hpp>
#include <ftopt/quant/none.hpp>
#include <ftopt/quant/dynamic_int8.hpp>
#include <ftopt/quant/static_int8.hpp>
#include <ftopt/quant/qat.hpp>
#include <ftopt/quant/support/engine.hpp>
#include <ftopt/quant/support/layers.hpp>
#include <ftopt/quant/support/observer.hpp>
#include <ftopt/quant/support/report.hpp>
#include <ftopt/quant/files/int8.hpp>

// The layers the policies extend, and the reference models built from them.
#include <ftopt/nn/extension.hpp>
#include <ftopt/nn/linear.hpp>
#include <ftopt/nn/conv2d.hpp>
#include <ftopt/nn/layer_norm.hpp>
#include <ftopt/nn/init.hpp>
#include <ftopt/nn/names.hpp>
#include <ftopt/nn/shared_input_linears.hpp>
#include <ftopt/nn/attention_prefix.hpp>
#include <ftopt/nn/chunked_attention.hpp>
#include <ftopt/nn/checkpoint.hpp>
#include <ftopt/nn/dropout.hpp>
#include <ftopt/models/mlp.hpp>
#include <ftopt/models/resnet.hpp>
#include <ftopt/models/vit.hpp>
#include <ftopt/models/bert.hpp>
#include <ftopt/models/bert_pretrained.hpp>

// Weights and data.
#include <ftopt/weights/state_dict.hpp>
#include <ftopt/weights/safetensors.hpp>
#include <ftopt/weights/pickle.hpp>
#include <ftopt/weights/torch_file.hpp>
#include <ftopt/weights/files.hpp>
#include <ftopt/data/idx.hpp>
#include <ftopt/data/fashion_mnist.hpp>
#include <ftopt/data/subsets.hpp>
#include <ftopt/data/tensor_batches.hpp>
#include <ftopt/data/text_set.hpp>

// Text.
#include <ftopt/text/unicode.hpp>
#include <ftopt/text/wordpiece.hpp>
#include <ftopt/text/bert_tokenizer.hpp>

// Comparing policy combinations.
#include <ftopt/grid/grid.hpp>
#include <ftopt/grid/run.hpp>
#include <ftopt/grid/report.hpp>
