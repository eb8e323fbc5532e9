#pragma once
/// ftopt::pipeline: data loading as composable stages, the result an input range the Trainer
/// consumes (docs/pipeline.md).
///
///   using namespace ftopt::pipeline;
///   auto batches = from(ImageFolder("train")) | shuffle(1) | decode_jpeg() | cache() |
///                  augment({.crop = RandomResizedCrop{.size = 28}, .horizontal_flip = 0.5}) |
///                  batch(64) | prefetch({.workers = 2}) | pin_memory() | to_device(device) |
///                  device_augment({.mean = {0.286}, .std = {0.353}});
///   trainer.fit(model, optimizer, batches);
///   auto texts = from(bbc) | shuffle(1) | tokenize(tokenizer, {.max_length = 128}) | pad_batch(32);

#include <ftopt/pipeline/device.hpp>
#include <ftopt/pipeline/jpeg.hpp>
#include <ftopt/pipeline/order.hpp>
#include <ftopt/pipeline/prefetch.hpp>
#include <ftopt/pipeline/samples.hpp>
#include <ftopt/pipeline/sources.hpp>
#include <ftopt/pipeline/stage.hpp>
#include <ftopt/pipeline/text.hpp>
