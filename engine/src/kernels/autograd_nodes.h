#pragma once
// DeviceRace's one-pass autograd nodes: each is one node of LibTorch's autograd graph whose
// forward and backward run this folder's loops in place of the several ATen ops (and their
// several nodes) of the reference path. The networks (models/) choose per call: with the
// lane's fast path on and the inputs fitting (the *Fits checks), the node; otherwise plain
// LibTorch. Each node counts itself (countFastPath, kernels/fast_paths.h). LibTorch's types are
// only named here (declared, not included): the nodes' .cpp files (kernels/*_node.cpp) are the
// fast paths' code that includes LibTorch. Lane thread only.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace at {
class Tensor;
} // namespace at
namespace torch::nn {
class BatchNorm2dImpl;
class Conv2dImpl;
class LinearImpl;
} // namespace torch::nn

namespace devicerace::detail {

/// Whether reluMaxPoolDropoutNode takes `x`: a 4-D float or bf16 CPU tensor of at least 2 x 2.
bool reluMaxPoolFits(const at::Tensor& x);
/// dropout(max_pool2d(relu(x), 2)), NCHW or channels_last, in one pass each way
/// (kernels/pool_kernels.h): the drop probability `p` with the counter-hash mask of `seed` (the
/// units laneDropout's hashed masks drop; p = 0: no dropout). `nchwOut`: a channels_last
/// input's output written in NCHW (the caller flattens it next). `roundToBf16`: x is fp32 whose
/// values are read rounded to bf16 (reluMaxPool2Rounding), the output bf16, x's gradient fp32.
at::Tensor reluMaxPoolDropoutNode(const at::Tensor& x, double p, std::uint64_t seed, bool nchwOut,
                                  bool roundToBf16 = false);

/// Whether batchNormReluNode takes `bn` and `x`: training, affine, tracked statistics, fp32
/// parameters, x a float or bf16 CPU tensor in channels_last.
bool fusedBatchNormFits(const torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x);
/// relu(bn(x) + residual) in training (`residual` may be undefined): one pass forward and two
/// back (kernels/norm_kernels.h), updating bn's running statistics as BatchNorm2d does.
at::Tensor batchNormReluNode(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& residual);

/// Whether residualForkNode takes `x`: a 4-D bf16 channels_last CPU tensor that requires its
/// gradient, in training.
bool residualForkFits(const at::Tensor& x);
/// x and its shortcut (x itself for stride 1 and pad 0; else every stride-th pixel with `pad`
/// zero channels, pad / 2 before x's, channels_last) as one node's two outputs (a residual
/// block's input: its convolution's and its shortcut's), whose two gradients that node adds in
/// one pass (kernels/norm_kernels.h) where autograd would add them with ATen's bf16 add.
std::pair<at::Tensor, at::Tensor> residualForkNode(const at::Tensor& x, std::int64_t stride, std::int64_t pad);

/// What convolveTuned and evaluateAsTrained return where a bf16 lane's convolution runs on its
/// bf16 values in fp32 arithmetic (elsewhere AsAutocast's and Unrounded's are the same):
/// - AsAutocast: the output rounded to bf16, as autocast's;
/// - Unrounded: the fp32 output as computed, its gradient taken in fp32 (the caller rounds it:
///   reluMaxPoolDropoutNode's roundToBf16); an fp32 output of a bf16 lane's convolution says so;
/// - Relu: relu of AsAutocast's output, in any arithmetic; where the arithmetic is fp32, the
///   rounding and the relu one pass forward (reluToBf16) and the relu's gradient and the widening
///   one pass back (reluGradToFloat), where autocast's output, ATen's relu_ and its backward
///   make four.
enum class ConvOutput { AsAutocast, Unrounded, Relu };

/// False when DEVICERACE_CONV_WGRAD=0 (benchmarks); "gemm" takes im2col + GEMM for every shape (tests).
bool tunedWeightGradEnabled();
/// Whether convolveTuned takes `conv` and `x`: training on a CPU, fp32 (or under bf16 autocast where
/// the CPU has AVX-512 BF16), x in channels_last, zero padding, no dilation or groups, with or
/// without a bias.
bool tunedWeightGradFits(const torch::nn::Conv2dImpl& conv, const at::Tensor& x);
/// conv(x) as one autograd node whose weight gradient is im2col + one MKL GEMM (fp32) or the AVX-512
/// BF16 kernel (bf16, fp32 sums: kernels/bf16_conv_wgrad.h) where that beat oneDNN's
/// backward-weights kernel for the shape, precision and thread count (timed once per process and
/// kept per machine, kernels/conv_wgrad.h), oneDNN's otherwise; its forward and input gradient
/// stay oneDNN's (under bf16 autocast in bf16, the casts autocast would make done in the node).
/// `out`: see ConvOutput.
at::Tensor convolveTuned(torch::nn::Conv2dImpl& conv, const at::Tensor& x, ConvOutput out = ConvOutput::AsAutocast);
/// conv(x) in evaluation (no gradients) on a bf16 autocast lane, where its training convolution of
/// the same geometry (any batch) chose its bf16 values in fp32 arithmetic: the same arithmetic,
/// the output rounded to bf16 as autocast's. Undefined where that does not apply (the caller runs
/// the module's forward, and its relu where `out` is Relu). `out`: see ConvOutput.
at::Tensor evaluateAsTrained(torch::nn::Conv2dImpl& conv, const at::Tensor& x, ConvOutput out = ConvOutput::AsAutocast);

/// A lane's bf16 dense-layer GEMM routes (one kernels/bf16_routes.h router on its threads).
struct DenseRoutes;
std::shared_ptr<DenseRoutes> makeDenseRoutes();
/// "fp32 for 2 of 3 GEMM shapes, oneDNN bf16 for 1 (the fastest timed on this CPU at 2 threads)";
/// empty before the lane's first dense layer.
std::string describeDenseRoutes(const DenseRoutes& routes);
/// Whether routedDense takes `fc` and `x`: under CPU bf16 autocast, x a 2-D float or bf16 CPU
/// tensor, fp32 parameters.
bool routedDenseFits(const torch::nn::LinearImpl& fc, const at::Tensor& x);
/// The same for a weight [out, in] and a bias (undefined: none) that are not a module's (a tied head).
bool routedDenseFits(const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& x);
/// fc(x) under bf16 autocast as one node whose three GEMMs (the forward, the input's and the
/// weight's gradients: bf16 operands, fp32 sums) each take the route timed fastest for its shape
/// on this CPU and thread count (MKL's or oneDNN's bf16 GEMM, the AVX-512 BF16 kernel, or the bf16
/// values widened to fp32), kept in the route cache: on a CPU whose bf16 arithmetic is slower
/// than its fp32 the dense layers stop paying the slower rate. Output bf16 as autocast's (the
/// bias added to the fp32 sums before the rounding); the weight's gradient fp32 from the sums.
/// Without gradients (evaluation), where the forward's route is fp32: the output is those bf16
/// values in an fp32 tensor (the same values; the ops after it then skip autocast's bf16 kernels
/// and casts, and a routed layer after it rounds its input again, a no-op).
at::Tensor routedDense(DenseRoutes& routes, torch::nn::LinearImpl& fc, const at::Tensor& x);
at::Tensor routedDense(DenseRoutes& routes, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& x);

/// torch::nn::LSTM's final hidden state over one_hot(tokens) (one layer, one direction, no
/// initial state; gates [i, f, g, o]) on a CPU in fp32, the one-hot input as a row gather and
/// the gates in one pass per step (kernels/lstm_kernels.h): tokens (batch, steps) int64 ->
/// (batch, hidden). Differentiable in the weights. Throws Error on a token outside W_ih's columns.
at::Tensor tokenLstm(const at::Tensor& tokens, const at::Tensor& wIh, const at::Tensor& wHh, const at::Tensor& bIh,
                     const at::Tensor& bHh);

/// One torch::nn::LSTMCell step on a CPU in fp32, the gates and the cell update in one pass each
/// way (kernels/lstm_kernels.h): x (batch, input), state (h, c) or none for zeros -> (h', c').
/// `bias` is the cell's b_ih + b_hh, summed once per sequence by the caller (autograd hands each
/// bias the sum's gradient). Differentiable in x, the state, the weights and the bias.
std::tuple<at::Tensor, at::Tensor> lstmCellOnePass(const at::Tensor& x,
                                                   const std::optional<std::tuple<at::Tensor, at::Tensor>>& state,
                                                   const at::Tensor& wIh, const at::Tensor& wHh,
                                                   const at::Tensor& bias);

} // namespace devicerace::detail
