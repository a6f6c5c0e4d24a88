// The workload registry, schedules and the initialisers shared by the model files.
#include "models/models.h"

#include <fmt/format.h>
#include <torch/nn/functional/padding.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <cstdlib>

#include "devicerace/environment.h"
#include "devicerace/errors.h"
#include "kernels/cpu_kernels.h"

namespace devicerace::detail {

std::uint64_t dropoutSeed(at::Generator& gen) {
    auto* impl = at::check_generator<at::CPUGeneratorImpl>(gen);
    std::lock_guard<std::mutex> lock(gen.mutex());
    return impl->random64();
}

bool dropoutOffForTests() {
    // Makes training deterministic in the batch split (dropout masks are drawn per rank).
    static const bool off = [] {
        const char* env = devicerace::environmentSwitch("DEVICERACE_TEST_NO_DROPOUT");
        return env && *env == '1';
    }();
    return off;
}

torch::Tensor laneDropout(const torch::Tensor& x, double p, bool training, at::Generator& gen, bool hashed) {
    if (!training || p <= 0 || dropoutOffForTests()) {
        return x;
    }
    if (x.is_cuda()) {
        // One kernel (mask and scale fused), drawing from the lane's generator; its p is the
        // probability to KEEP.
        return std::get<0>(at::_fused_dropout(x, 1.0 - p, gen));
    }
    if (!hashed) {
        // ATen's CPU dropout (a bernoulli_ keep mask scaled by 1/(1-p), one multiply), drawn from
        // the lane's generator rather than the process's default one.
        return x * at::empty_like(x).bernoulli_(1.0 - p, gen).div_(1.0 - p);
    }
    countFastPath();
    // The scaled mask from the lanes' hashed masks (kernels/cpu_kernels.h), one seed per call,
    // then one multiply (and one in backward): the fused dense step drops the same units. The
    // mask is made in x's precision and memory layout (a bf16 lane's mask is written in bf16, an
    // NHWC one in NHWC), indexed as NCHW either way: channels_last drops the units NCHW drops.
    const auto seed = dropoutSeed(gen);
    const auto drop = static_cast<float>(p);
    const bool bf16 = x.scalar_type() == at::kBFloat16;
    if (!bf16 && x.scalar_type() != at::kFloat) {
        auto mask = at::empty(x.sizes(), x.options().dtype(at::kFloat));
        cpu::dropoutMask(mask.data_ptr<float>(), mask.numel(), drop, seed);
        return x * mask.to(x.scalar_type());
    }
    const bool nhwc = x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast);
    auto mask = at::empty(
        x.sizes(), x.options().memory_format(nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous));
    if (nhwc) {
        const auto images = x.size(0), channels = x.size(1), spatial = x.size(2) * x.size(3);
        if (bf16) {
            cpu::dropoutMaskNhwc(reinterpret_cast<cpu::Bf16*>(mask.data_ptr<at::BFloat16>()), images, channels, spatial,
                                 drop, seed);
        } else {
            cpu::dropoutMaskNhwc(mask.data_ptr<float>(), images, channels, spatial, drop, seed);
        }
    } else if (bf16) {
        cpu::dropoutMask(reinterpret_cast<cpu::Bf16*>(mask.data_ptr<at::BFloat16>()), mask.numel(), drop, seed);
    } else {
        cpu::dropoutMask(mask.data_ptr<float>(), mask.numel(), drop, seed);
    }
    return x * mask;
}

// The fast paths' one-pass nodes where the lane takes them and the inputs fit
// (kernels/autograd_nodes.h); otherwise what a LibTorch user writes.

namespace {
// The one-pass node, its dropout's seed drawn where laneDropout draws it (one per dropout).
torch::Tensor reluPoolNode(const torch::Tensor& x, double p, bool training, at::Generator& gen, bool flattenNext,
                           bool roundToBf16) {
    const bool dropout = training && p > 0 && !dropoutOffForTests();
    const auto seed = dropout ? dropoutSeed(gen) : 0;
    return reluMaxPoolDropoutNode(x, dropout ? p : 0.0, seed, flattenNext, roundToBf16);
}
} // namespace

torch::Tensor reluMaxPoolDropout(const torch::Tensor& x, double p, bool training, at::Generator& gen, bool fused,
                                 bool hashed, bool flattenNext) {
    if (!fused || !reluMaxPoolFits(x)) {
        namespace F = torch::nn::functional;
        return laneDropout(F::max_pool2d(x.relu(), F::MaxPool2dFuncOptions(2)), p, training, gen, hashed);
    }
    return reluPoolNode(x, p, training, gen, flattenNext, false);
}

torch::Tensor batchNormRelu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual,
                            bool fused) {
    if (!fused || !fusedBatchNormFits(bn, x)) {
        auto h = bn.forward(x);
        return (residual.defined() ? h + residual : h).relu_();
    }
    return batchNormReluNode(bn, x, residual);
}

std::pair<torch::Tensor, torch::Tensor> forkResidual(const torch::Tensor& x, std::int64_t stride, std::int64_t pad,
                                                     bool fused) {
    if (fused && residualForkFits(x)) {
        return residualForkNode(x, stride, pad);
    }
    if (stride == 1 && pad == 0) {
        return {x, x};
    }
    const auto sub = x.slice(2, 0, x.size(2), stride).slice(3, 0, x.size(3), stride);
    return {x, torch::nn::functional::pad(sub,
                                          torch::nn::functional::PadFuncOptions({0, 0, 0, 0, pad / 2, pad - pad / 2}))};
}

torch::Tensor convolve(torch::nn::Conv2dImpl& conv, const torch::Tensor& x, bool fused) {
    if (fused && tunedWeightGradFits(conv, x)) {
        return convolveTuned(conv, x);
    }
    if (fused) {
        if (auto y = evaluateAsTrained(conv, x); y.defined()) {
            return y;
        }
    }
    return conv.forward(x);
}

torch::Tensor convolveRelu(torch::nn::Conv2dImpl& conv, const torch::Tensor& x, bool fused) {
    if (fused && tunedWeightGradFits(conv, x)) {
        return convolveTuned(conv, x, ConvOutput::Relu);
    }
    if (fused) {
        if (auto y = evaluateAsTrained(conv, x, ConvOutput::Relu); y.defined()) {
            return y;
        }
    }
    return conv.forward(x).relu_();
}

torch::Tensor convolveReluPool(torch::nn::Conv2dImpl& conv, const torch::Tensor& x, bool fusedConv, double p,
                               bool training, at::Generator& gen, bool fusedPool, bool hashed, bool flattenNext) {
    const bool bf16Autocast =
        at::autocast::is_autocast_enabled(at::kCPU) && at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16;
    if (!fusedConv || !fusedPool || !bf16Autocast) {
        return reluMaxPoolDropout(convolve(conv, x, fusedConv), p, training, gen, fusedPool, hashed, flattenNext);
    }
    torch::Tensor y;
    if (tunedWeightGradFits(conv, x)) {
        y = convolveTuned(conv, x, ConvOutput::Unrounded);
    } else if (y = evaluateAsTrained(conv, x, ConvOutput::Unrounded); !y.defined()) {
        y = conv.forward(x);
    }
    if (y.scalar_type() != at::kFloat) { // the convolution's arithmetic is bf16: rounded already
        return reluMaxPoolDropout(y, p, training, gen, fusedPool, hashed, flattenNext);
    }
    if (!reluMaxPoolFits(y)) {
        return reluMaxPoolDropout(y.to(at::kBFloat16), p, training, gen, fusedPool, hashed, flattenNext);
    }
    return reluPoolNode(y, p, training, gen, flattenNext, true);
}

namespace {
// Without gradients, fewer rows than this keep autocast's linear: each new shape's routes are timed
// (~50-100 ms), and a model sampling text token by token makes a shape of every length (char-gpt's
// up to 64 rows). Evaluation batches are larger (fashion-cnn's ~1,000 images).
constexpr std::int64_t kMinRoutedEvalRows = 256;

// The routed node's output, or undefined where it does not take x (the caller's linear runs).
torch::Tensor routed(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& x,
                     DenseRoutes* routes) {
    const auto rows = x.numel() / std::max<std::int64_t>(1, x.size(-1));
    if (!routes || (!torch::GradMode::is_enabled() && rows < kMinRoutedEvalRows)) {
        return {};
    }
    // [..., in]: the rows of every leading index, as one matrix
    const auto matrix = x.dim() > 2 ? x.reshape({-1, x.size(-1)}) : x;
    if (!routedDenseFits(weight, bias, matrix)) {
        return {};
    }
    auto sizes = x.sizes().vec();
    sizes.back() = weight.size(0);
    return routedDense(*routes, weight, bias, matrix).view(sizes);
}
} // namespace

torch::Tensor dense(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& x,
                    DenseRoutes* routes) {
    auto y = routed(weight, bias, x, routes);
    return y.defined() ? y : at::linear(x, weight, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt);
}

torch::Tensor dense(torch::nn::LinearImpl& fc, const torch::Tensor& x, DenseRoutes* routes) {
    auto y = routed(fc.weight, fc.bias, x, routes);
    return y.defined() ? y : fc.forward(x);
}

std::shared_ptr<DenseRoutes> denseRoutesFor(const FastPaths& fast) {
    return fast.bf16Dense ? makeDenseRoutes() : nullptr;
}

namespace {
// fan_in = in * receptive field, fan_out = out * receptive field (Keras/PyTorch convention).
std::pair<double, double> fans(const torch::Tensor& w) {
    const auto receptive = w.dim() > 2 ? w[0][0].numel() : 1;
    return {static_cast<double>(w.size(1) * receptive), static_cast<double>(w.size(0) * receptive)};
}
} // namespace

void glorotInit(torch::nn::Module& module, at::Generator& gen) {
    torch::NoGradGuard noGrad;
    for (auto& item : module.named_parameters(/*recurse=*/true)) {
        auto& p = item.value();
        if (p.dim() >= 2) {
            auto [fanIn, fanOut] = fans(p);
            const double bound = std::sqrt(6.0 / (fanIn + fanOut));
            p.uniform_(-bound, bound, gen);
        } else {
            p.zero_();
        }
    }
}

void heInit(torch::nn::Module& module, at::Generator& gen) {
    torch::NoGradGuard noGrad;
    // Called from constructors: the module is not in a shared_ptr yet, so no modules(include_self).
    std::vector<torch::nn::Module*> all{&module};
    for (auto& m : module.modules(/*include_self=*/false)) {
        all.push_back(m.get());
    }
    for (auto* m : all) {
        for (auto& item : m->named_parameters(/*recurse=*/false)) {
            auto& p = item.value();
            const bool batchNorm = dynamic_cast<torch::nn::BatchNorm2dImpl*>(m) != nullptr;
            if (batchNorm) {
                item.key() == "weight" ? p.fill_(1.0) : p.zero_();
            } else if (p.dim() == 4) {
                p.normal_(0.0, std::sqrt(2.0 / fans(p).second), gen);
            } else if (p.dim() == 2) {
                const double bound = 1.0 / std::sqrt(fans(p).first);
                p.uniform_(-bound, bound, gen);
            } else {
                p.zero_();
            }
        }
    }
}

void lstmInit(torch::nn::Module& module, std::int64_t hidden, at::Generator& gen) {
    torch::NoGradGuard noGrad;
    const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
    for (auto& p : module.parameters()) {
        p.uniform_(-bound, bound, gen);
    }
}

double scheduleFactor(const std::string& schedule, std::int64_t step, std::int64_t total) {
    const double f = total > 0 ? static_cast<double>(step) / static_cast<double>(total) : 0;
    if (schedule == "step") {
        // The seed's boundaries 40k / 60k / 80k, on a nominal 90k-step run scaled to this one.
        return f < 4.0 / 9 ? 1.0 : f < 6.0 / 9 ? 0.1 : f < 8.0 / 9 ? 0.01 : 0.001;
    }
    if (schedule == "onecycle") {
        // DAWNBench DavidNet: piecewise linear through (0, 0), (5/24, 1), (1, 0).
        constexpr double kPeak = 5.0 / 24.0;
        return f < kPeak ? f / kPeak : std::max(0.0, (1.0 - f) / (1.0 - kPeak));
    }
    if (schedule == "cosine") {
        // nanoGPT: linear warm-up over the first 5% (100 of its 2,000 CPU iterations), then a
        // cosine from 1 down to min_lr = lr / 10 at the end of the run.
        constexpr double kWarm = 0.05, kMin = 0.1;
        if (f < kWarm) {
            return (static_cast<double>(step) + 1) / (kWarm * static_cast<double>(total) + 1);
        }
        const double ratio = std::min(1.0, (f - kWarm) / (1.0 - kWarm));
        return kMin + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (1.0 - kMin);
    }
    return 1.0;
}

std::int64_t countParameters(const WorkloadImpl& w) {
    auto model = w.makeModel(at::detail::createCPUGenerator(0), ModelOptions{});
    std::int64_t n = 0;
    for (const auto& p : model->parameters()) {
        n += p.numel();
    }
    return n;
}

namespace {

const std::vector<WorkloadImpl>& registry() {
    static const std::vector<WorkloadImpl> list = [] {
        std::vector<WorkloadImpl> all;
        for (auto part : {kerasWorkloads(), resnetWorkloads(), rnnWorkloads(), gptWorkloads()}) {
            for (auto& w : part) {
                all.push_back(std::move(w));
            }
        }
        return all; // parameters: counted on demand (countedInfo), not here
    }();
    return list;
}

} // namespace

const WorkloadImpl& workloadImpl(const std::string& name) {
    for (const auto& w : registry()) {
        if (w.info.name == name) {
            return w;
        }
    }
    std::string known;
    for (const auto& w : registry()) {
        known += (known.empty() ? "" : ", ") + w.info.name;
    }
    throw UsageError(fmt::format("unknown workload '{}' (known: {})", name, known));
}

} // namespace devicerace::detail

namespace devicerace {

namespace {

// The workloads in the order they are listed, each with its parameter count. A count builds the
// network (ResNet-50's initialisation is most of the ~0.4 s that counting all 13 took at every
// start), so each is counted once, when its workload is first asked for: a race or a worker
// builds only its own.
struct CountedInfo {
    WorkloadInfo info;
    std::once_flag counted;
    std::atomic<bool> done{false};
};

std::vector<CountedInfo>& countedInfos() {
    static std::vector<CountedInfo> infos = [] {
        const char* order[] = {"fashion-mlp", "fashion-cnn", "cifar-resnet20",   "cifar-resnet32", "cifar-resnet56",
                               "cifar-vgg",   "davidnet",    "imdb-bilstm",      "fasttext",       "charlstm",
                               "char-gpt",    "char-gpt-6l", "imagenet-resnet50"};
        std::vector<CountedInfo> out(std::size(order));
        for (std::size_t i = 0; i < out.size(); ++i) {
            out[i].info = detail::workloadImpl(order[i]).info;
        }
        return out;
    }();
    return infos;
}

const WorkloadInfo& countedInfo(CountedInfo& entry) {
    std::call_once(entry.counted, [&] {
        entry.info.parameters = detail::countParameters(detail::workloadImpl(entry.info.name));
        entry.done = true;
    });
    return entry.info;
}

} // namespace

std::vector<std::string> detail::countedWorkloadNames() {
    std::vector<std::string> names;
    for (const auto& entry : countedInfos()) {
        if (entry.done) {
            names.push_back(entry.info.name);
        }
    }
    return names;
}

const std::vector<WorkloadInfo>& workloads() {
    static const std::vector<WorkloadInfo> infos = [] {
        std::vector<WorkloadInfo> out;
        for (auto& entry : countedInfos()) {
            out.push_back(countedInfo(entry));
        }
        return out;
    }();
    return infos;
}

std::int64_t tokensPerSampleOf(const std::string& name) {
    for (const auto& entry : countedInfos()) { // the fixed fields, counted or not
        if (entry.info.name == name) {
            return entry.info.tokensPerSample;
        }
    }
    return 0;
}

const WorkloadInfo& findWorkload(const std::string& name) {
    if (name == kScriptWorkload) {
        // A user's own training command: DeviceRace knows nothing of its network or data.
        static const WorkloadInfo script = [] {
            WorkloadInfo w;
            w.name = kScriptWorkload;
            w.description = "your own training command, run once per lane (README, \"Race your own training\")";
            w.dataset = "the script's own";
            w.origin = "yours";
            w.optimizer = "the script's own";
            w.defaultBatch = 0;
            w.defaultLr = 0;
            w.defaultTarget = 0;
            w.cudaGraphByDefault = false;
            return w;
        }();
        return script;
    }
    for (auto& entry : countedInfos()) {
        if (entry.info.name == name) {
            return countedInfo(entry);
        }
    }
    return detail::workloadImpl(name).info; // throws the UsageError listing the known names
}

} // namespace devicerace
