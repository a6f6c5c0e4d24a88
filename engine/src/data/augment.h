#pragma once
// Per-example augmentation of image batches (lane key augment=crop-flip): the input work a real
// training pipeline does for CIFAR-style data, so that a lane's "data" phase carries it
// (input-bound flag; seed 002's synthetic-vs-real point). Lane thread only.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace devicerace::detail {

/// Each example of `x` ([N, C, H, W], any dtype, any device) zero-padded by `pad` pixels on every
/// side, cropped back to H x W at a random offset (0 .. 2*pad in each direction) and flipped
/// left-right with probability 1/2: torchvision's RandomCrop(padding=pad) + RandomHorizontalFlip.
/// The draws (offsets, flips) come from `gen`, a CPU generator, so a seed repeats them on any
/// device. Returns a new tensor on x's device.
at::Tensor cropFlip(const at::Tensor& x, at::Generator& gen, std::int64_t pad = 4);

} // namespace devicerace::detail
