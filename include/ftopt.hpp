#pragma once
/// ftopt: compile-time assembled fine-tuning loops for LibTorch. Everything, in one include.

#include <ftopt/axis.hpp>
#include <ftopt/batch.hpp>
#include <ftopt/callbacks/callback.hpp>
#include <ftopt/callbacks/progress_bar.hpp>
#include <ftopt/data/fashion_mnist.hpp>
#include <ftopt/data/idx.hpp>
#include <ftopt/data/tensor_batches.hpp>
#include <ftopt/detail/compat.hpp>
#include <ftopt/error.hpp>
#include <ftopt/hardware.hpp>
#include <ftopt/memory/none.hpp>
#include <ftopt/model.hpp>
#include <ftopt/models/mlp.hpp>
#include <ftopt/parallel/single.hpp>
#include <ftopt/peft/full.hpp>
#include <ftopt/precision/fp32.hpp>
#include <ftopt/quant/none.hpp>
#include <ftopt/rules.hpp>
#include <ftopt/schedule/warmup_cosine.hpp>
#include <ftopt/state.hpp>
#include <ftopt/trainer.hpp>
#include <ftopt/trainer_options.hpp>
