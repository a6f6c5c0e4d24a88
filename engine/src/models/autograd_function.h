#pragma once
// What the models' one-pass autograd Functions share (lstm_cell.cpp, lstm_tokens.cpp): the
// autograd names and fp32 data pointers for the kernels/ loops. Internal to engine/src/models.
#include <ATen/core/Tensor.h>
#include <torch/autograd.h>

namespace devicerace::detail {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The float data of an fp32 tensor (throws for another dtype).
inline float* f32(const at::Tensor& t) { return t.data_ptr<float>(); }

} // namespace devicerace::detail
