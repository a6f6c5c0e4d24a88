#pragma once
// The workload zoo's networks, their optimizers and schedules. Lane thread only: a model
// belongs to the lane that built it.
#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "devicerace/workload.h"
#include "models/optimizer_recipe.h"
#include "kernels/autograd_nodes.h"
#include "kernels/fast_paths.h"

namespace devicerace::detail {

/// Options a lane may override that shape the network itself.
struct ModelOptions {
    bool fusedLstm = true; // lstm=fused (torch::nn::LSTM, cuDNN on GPU) or lstm=cells (an LSTMCell loop)
    FastPaths fast;        // the lane's fast paths (kernels/fast_paths.h); none: plain LibTorch layers
    int vocabulary = 0;    // token inputs whose vocabulary comes from the data (charlstm); 0: the default
};

/// One layer of a network that is a plain stack of dense layers: x -> dropout(relu?(x W^T + b)).
struct DenseLayerView {
    torch::Tensor weight, bias; // the module's parameters ([out, in] and [out])
    bool relu = false;
    double dropout = 0; // only after a relu
};

/// One pre-LayerNorm decoder block's parameters (models_gpt.cpp): the module's own tensors.
struct GptBlockView {
    torch::Tensor ln1Weight, ln1Bias, attnWeight, attnBias, projWeight, projBias;
    torch::Tensor ln2Weight, ln2Bias, fcWeight, fcBias, mlpWeight, mlpBias;
};

/// A GPT-2 style decoder over token ids (char-gpt): token and position embeddings, the blocks
/// (causal attention, GELU MLP), a final LayerNorm and the head tied to the token embedding.
struct GptView {
    std::int64_t heads = 0;
    double dropout = 0;
    torch::Tensor wte, wpe, lnFWeight, lnFBias;
    std::vector<GptBlockView> blocks;
};

/// A network: inputs (images in [0,1]/normalised, or token ids) -> logits.
struct Net : torch::nn::Module {
    virtual torch::Tensor forward(const torch::Tensor& x) = 0;
    /// The layers, when the network is exactly a stack of dense layers on its flattened input
    /// (a CPU lane may then train it with the fused step, train/fused/dense_step.h); empty otherwise.
    virtual std::vector<DenseLayerView> denseStack() { return {}; }
    /// The decoder's shape and parameters, when the network is exactly a GPT (a CPU lane may
    /// then train it with the fused step, train/fused/gpt_step.h); nullopt otherwise.
    virtual std::optional<GptView> gptView() { return std::nullopt; }
    /// Source of dropout masks and sampling; must live on the model's device (set after moving).
    at::Generator gen;
    /// Whether a CPU dropout draws the counter-hash masks (laneDropout), not ATen's bernoulli_.
    bool hashedDropout = false;
    /// Whether forward runs the CPU's fused relu + max pool + dropout (reluMaxPoolDropout).
    bool fusedPool = false;
    /// Whether an fp32 CPU forward runs its LSTM over token ids (tokenLstm), not one-hot vectors.
    bool tokenLstm = false;
    /// Whether an fp32 CPU forward runs its LSTMCell loop's gates in one pass (lstmCellOnePass).
    bool onePassCells = false;
    /// Whether a CPU training forward runs batch norm + residual add + relu in one pass where
    /// the activations are channels_last (batchNormRelu).
    bool fusedNorm = false;
    /// Whether forward sends its convolutions through convolve, whose weight gradient may be
    /// im2col + GEMM where timed faster (CPU fp32 training on channels_last-strided inputs).
    bool tunedConvs = false;
    /// A bf16 CPU lane's dense-layer GEMM routes, where forward sends its dense layers through
    /// dense (kernels/autograd_nodes.h: routedDense); null otherwise.
    std::shared_ptr<DenseRoutes> denseRoutes;
};

/// Builds a network with weights drawn from `gen` (the lane's own generator, so two lanes with
/// one seed start identically); dropout masks also come from the lane's generator.
using ModelFactory = std::function<std::shared_ptr<Net>(at::Generator gen, const ModelOptions& options)>;

enum class Task {
    Classify, // softmax cross-entropy over classes; accuracy = argmax
    Binary,   // one logit, sigmoid cross-entropy; accuracy = logit > 0
    // Next-token prediction: an example is T+1 tokens, the network sees the first T and is
    // scored at every position on the next one (logits B x T x V); accuracy per token.
    LanguageModel
};

/// One workload, declared as one table row (models_keras.cpp, models_resnet.cpp, models_rnn.cpp,
/// models_gpt.cpp). The workload schema (workers/workload_schema.cpp) hands every field but the
/// factory to the other frameworks' lanes, which build their networks from it.
struct WorkloadImpl {
    WorkloadInfo info;
    Task task = Task::Classify;
    ModelFactory makeModel;
    OptimizerRecipe optimizer; // the update rule; hyperparameters come from the lane
    /// The network's shape as named numbers ("depth" of a CIFAR ResNet; "layers", "heads",
    /// "width", "context", "dropout" of a GPT): what another framework's lane builds it from.
    std::vector<std::pair<std::string, double>> network;
};

/// Throws UsageError for unknown names.
const WorkloadImpl& workloadImpl(const std::string& name);
/// The trainable parameters of a workload's network at its defaults (builds it once on the CPU).
std::int64_t countParameters(const WorkloadImpl& w);
/// The workloads whose networks have been built to count their parameters so far in this
/// process, in list order (findWorkload counts one, workloads() all 13).
std::vector<std::string> countedWorkloadNames();

/// The learning-rate multiplier at `step` of `total` for a schedule name
/// ("constant", "step": x0.1 at 4/9, 6/9, 8/9 of the run — the seed's 40k/60k/80k of 90k —,
/// "onecycle": linear 0 -> 1 over the first 5/24, then linear -> 0, "cosine": nanoGPT's linear
/// warm-up over the first 5%, then a cosine down to 0.1).
double scheduleFactor(const std::string& schedule, std::int64_t step, std::int64_t total);

// Initialisation and layers shared by the model files (all draw from the lane's generator).
/// Tests of data-parallel arithmetic: DEVICERACE_TEST_NO_DROPOUT=1 turns dropout off.
bool dropoutOffForTests();
/// The seed of one CPU dropout mask (kernels/cpu_kernels.h), drawn from the lane's CPU generator.
std::uint64_t dropoutSeed(at::Generator& gen);
/// Dropout drawing from the lane's generator: on a CPU with `hashed`, the counter-hash masks
/// (kernels/cpu_kernels.h: the fused steps drop the same units); otherwise ATen's own ops (a
/// bernoulli_ mask and one multiply on a CPU, _fused_dropout on CUDA).
torch::Tensor laneDropout(const torch::Tensor& x, double p, bool training, at::Generator& gen, bool hashed);
/// laneDropout(max_pool2d(relu(x), 2), p): with `fused` and where it fits (reluMaxPoolFits), the
/// one-pass node (kernels/autograd_nodes.h; the same values and the units hashed masks drop);
/// otherwise the three ops, the dropout `hashed` or not. p = 0: no dropout. `flattenNext`: the caller flattens
/// the result, so a fused pass writes it in NCHW (the flatten is then a view, not a transposing copy).
torch::Tensor reluMaxPoolDropout(const torch::Tensor& x, double p, bool training, at::Generator& gen, bool fused,
                                 bool hashed, bool flattenNext = false);
/// relu(bn(x) + residual) (`residual` may be undefined): with `fused` and where it fits
/// (fusedBatchNormFits), the one-pass node (kernels/autograd_nodes.h); otherwise the module and
/// ATen's ops.
torch::Tensor batchNormRelu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual,
                            bool fused);
/// A residual block's input for its convolution and its shortcut (He et al.'s option A: x, or every
/// stride-th pixel with `pad` zero channels, pad / 2 before x's): with `fused` and where it fits
/// (residualForkFits), two outputs of one node that adds their gradients itself
/// (kernels/autograd_nodes.h); otherwise x and ATen's slices and pad.
std::pair<torch::Tensor, torch::Tensor> forkResidual(const torch::Tensor& x, std::int64_t stride, std::int64_t pad,
                                                     bool fused);
/// conv(x): with `fused` and where it fits (tunedWeightGradFits), the node whose weight gradient
/// is timed against im2col + GEMM (convolveTuned, kernels/autograd_nodes.h); otherwise the
/// module's forward.
torch::Tensor convolve(torch::nn::Conv2dImpl& conv, const torch::Tensor& x, bool fused);
/// convolve(conv, x, fused).relu_(): the same values; where a bf16 lane's convolution runs in fp32
/// arithmetic, its rounding and the relu one pass forward and one back (ConvOutput::Relu).
torch::Tensor convolveRelu(torch::nn::Conv2dImpl& conv, const torch::Tensor& x, bool fused);
/// reluMaxPoolDropout(convolve(conv, x, fusedConv), p, ...): the same values, and where a bf16
/// lane's convolution runs in fp32 arithmetic (the bf16 values widened) and the pool is fused, the
/// convolution's fp32 output goes to the pool unrounded and the pool rounds it as it reads it (and
/// its gradient comes back in fp32): two passes over the convolution's output fewer a step.
torch::Tensor convolveReluPool(torch::nn::Conv2dImpl& conv, const torch::Tensor& x, bool fusedConv, double p,
                               bool training, at::Generator& gen, bool fusedPool, bool hashed,
                               bool flattenNext = false);
/// fc(x), x [rows, in] or [..., in]: with `routes` and where it fits (routedDenseFits: under CPU
/// bf16 autocast), the node whose GEMMs each take their shape's fastest route (routedDense,
/// kernels/autograd_nodes.h); otherwise the module's forward.
torch::Tensor dense(torch::nn::LinearImpl& fc, const torch::Tensor& x, DenseRoutes* routes);
/// The same for a weight [out, in] and a bias (undefined: none) of no module (a tied output head).
torch::Tensor dense(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& x,
                    DenseRoutes* routes);
/// The routes a network's dense layers take: made where the lane's plan has the bf16-dense lever.
std::shared_ptr<DenseRoutes> denseRoutesFor(const FastPaths& fast);
/// Keras' default initialisation: Glorot-uniform weights, zero biases.
void glorotInit(torch::nn::Module& module, at::Generator& gen);
/// He et al.: conv weights N(0, 2/fan_out), batch-norm scale 1 / shift 0, linear U(+-1/sqrt(fan_in)).
void heInit(torch::nn::Module& module, at::Generator& gen);
/// PyTorch's LSTM default, U(+-1/sqrt(hidden)), from the lane's generator.
void lstmInit(torch::nn::Module& module, std::int64_t hidden, at::Generator& gen);

// The model files' registrations.
std::vector<WorkloadImpl> kerasWorkloads();  // fashion-mlp, fashion-cnn, cifar-vgg, fasttext
std::vector<WorkloadImpl> resnetWorkloads(); // cifar-resnet20/32/56, davidnet, imagenet-resnet50
std::vector<WorkloadImpl> rnnWorkloads();    // imdb-bilstm, charlstm
std::vector<WorkloadImpl> gptWorkloads();    // char-gpt, char-gpt-6l
/// Causal self-attention of (B, heads, T, head size) queries, keys and values: the fused kernel of
/// the device, in fp32 on a CPU under bf16 autocast (models_gpt.cpp says why).
torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
/// Whether a bf16 CPU lane's attention runs PyTorch's bf16 flash kernel (long sequences, heads of
/// 64 or more) rather than the fp32 one on upcast inputs (models_gpt.cpp says why).
bool bf16AttentionPays(std::int64_t sequence, std::int64_t headSize);
/// A char-gpt network's trainable parameters, by formula (checked against the built model).
std::int64_t gptParameterCount(std::int64_t layers, std::int64_t width, std::int64_t context, std::int64_t vocabulary);

} // namespace devicerace::detail
