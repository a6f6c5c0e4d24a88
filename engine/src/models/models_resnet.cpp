// Residual networks of the seed posts: the CIFAR ResNets of He et al. (seed 000), the
// DAWNBench "DavidNet" ResNet-9 (seed 004) and ResNet-50 v1.5 (seed 002).
#include <torch/nn/functional.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdlib>

#include "models/models.h"

namespace devicerace::detail {

namespace F = torch::nn::functional;
using torch::nn::BatchNorm2d;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;

namespace {

// The CPU levers of the lane's fast paths a ResNet's layers take: batch norm + add + relu in one
// pass (batchNormRelu) and convolve's tuned weight gradient.
struct Levers {
    bool norm = false;
    bool conv = false;
};
Levers leversOf(const ModelOptions& o) { return {o.fast.normRelu, o.fast.convWeightGrad}; }

Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride = 1) {
    return Conv2d(Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

// He et al. 2015, "Deep Residual Learning", CIFAR-10 section: basic blocks, option-A shortcuts
// (identity, strided and zero-padded on channels, no parameters).
struct BasicBlockImpl : torch::nn::Module {
    BasicBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride, Levers levers)
        : m_pad(out - in), m_stride(stride), m_levers(levers) {
        c1 = register_module("c1", conv(in, out, 3, stride));
        b1 = register_module("b1", BatchNorm2d(out));
        c2 = register_module("c2", conv(out, out, 3));
        b2 = register_module("b2", BatchNorm2d(out));
    }
    torch::Tensor forward(const torch::Tensor& input) {
        const auto [x, shortcut] = forkResidual(input, m_stride, m_pad, m_levers.norm);
        auto h = batchNormRelu(*b1, convolve(*c1, x, m_levers.conv), {}, m_levers.norm);
        return batchNormRelu(*b2, convolve(*c2, h, m_levers.conv), shortcut, m_levers.norm);
    }
    Conv2d c1{nullptr}, c2{nullptr};
    BatchNorm2d b1{nullptr}, b2{nullptr};
    std::int64_t m_pad, m_stride;
    Levers m_levers;
};
TORCH_MODULE(BasicBlock);

struct CifarResNet : Net {
    CifarResNet(int blocksPerStage, at::Generator initGen, Levers levers) {
        gen = std::move(initGen);
        fusedNorm = levers.norm;
        tunedConvs = levers.conv;
        stem = register_module("stem", conv(3, 16, 3));
        bn = register_module("bn", BatchNorm2d(16));
        std::int64_t in = 16;
        for (std::int64_t width : {16, 32, 64}) {
            for (int b = 0; b < blocksPerStage; ++b) {
                const std::int64_t stride = (b == 0 && width != 16) ? 2 : 1;
                blocks->push_back(BasicBlock(in, width, stride, levers));
                in = width;
            }
        }
        register_module("blocks", blocks);
        fc = register_module("fc", torch::nn::Linear(64, 10));
        heInit(*this, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override {
        auto h = batchNormRelu(*bn, convolve(*stem, x, tunedConvs), {}, fusedNorm);
        h = blocks->forward(h);
        return fc->forward(h.mean({2, 3}));
    }
    Conv2d stem{nullptr};
    BatchNorm2d bn{nullptr};
    torch::nn::Sequential blocks;
    torch::nn::Linear fc{nullptr};
};

// myrtle.ai "How to train your ResNet" (DAWNBench CIFAR-10): prep, three layers with two
// residual blocks, max-pool 4, a bias-free linear layer scaled by 1/8.
struct ConvBnImpl : torch::nn::Module {
    ConvBnImpl(std::int64_t in, std::int64_t out, Levers levers) : m_levers(levers) {
        c = register_module("c", conv(in, out, 3));
        b = register_module("b", BatchNorm2d(out));
    }
    torch::Tensor forward(const torch::Tensor& x) {
        return batchNormRelu(*b, convolve(*c, x, m_levers.conv), {}, m_levers.norm);
    }
    Conv2d c{nullptr};
    BatchNorm2d b{nullptr};
    Levers m_levers;
};
TORCH_MODULE(ConvBn);

struct DavidNet : Net {
    DavidNet(at::Generator initGen, Levers levers) {
        gen = std::move(initGen);
        fusedNorm = levers.norm;
        tunedConvs = levers.conv;
        prep = register_module("prep", ConvBn(3, 64, levers));
        l1 = register_module("l1", ConvBn(64, 128, levers));
        r1a = register_module("r1a", ConvBn(128, 128, levers));
        r1b = register_module("r1b", ConvBn(128, 128, levers));
        l2 = register_module("l2", ConvBn(128, 256, levers));
        l3 = register_module("l3", ConvBn(256, 512, levers));
        r3a = register_module("r3a", ConvBn(512, 512, levers));
        r3b = register_module("r3b", ConvBn(512, 512, levers));
        fc = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(512, 10).bias(false)));
        heInit(*this, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override {
        auto pool = [](const torch::Tensor& t, int k) { return F::max_pool2d(t, F::MaxPool2dFuncOptions(k)); };
        auto h = prep->forward(x);
        h = pool(l1->forward(h), 2);
        h = h + r1b->forward(r1a->forward(h));
        h = pool(l2->forward(h), 2);
        h = pool(l3->forward(h), 2);
        h = h + r3b->forward(r3a->forward(h));
        h = F::adaptive_max_pool2d(h, F::AdaptiveMaxPool2dFuncOptions(1)).flatten(1);
        return fc->forward(h) * 0.125; // the reference's output scale
    }
    ConvBn prep{nullptr}, l1{nullptr}, r1a{nullptr}, r1b{nullptr}, l2{nullptr}, l3{nullptr}, r3a{nullptr}, r3b{nullptr};
    torch::nn::Linear fc{nullptr};
};

// torchvision ResNet-50 v1.5 (NVIDIA DeepLearningExamples): the stride sits on the 3x3 conv.
struct BottleneckImpl : torch::nn::Module {
    BottleneckImpl(std::int64_t in, std::int64_t width, std::int64_t stride, Levers levers) : m_levers(levers) {
        const std::int64_t out = width * 4;
        c1 = register_module("c1", conv(in, width, 1));
        b1 = register_module("b1", BatchNorm2d(width));
        c2 = register_module("c2", conv(width, width, 3, stride));
        b2 = register_module("b2", BatchNorm2d(width));
        c3 = register_module("c3", conv(width, out, 1));
        b3 = register_module("b3", BatchNorm2d(out));
        if (stride != 1 || in != out) {
            down = register_module("down", torch::nn::Sequential(conv(in, out, 1, stride), BatchNorm2d(out)));
        }
    }
    torch::Tensor forward(const torch::Tensor& x) {
        auto h = batchNormRelu(*b1, convolve(*c1, x, m_levers.conv), {}, m_levers.norm);
        h = batchNormRelu(*b2, convolve(*c2, h, m_levers.conv), {}, m_levers.norm);
        // The projection (1x1 conv, stride 2 in a stage's first block, then batch norm, no relu).
        const auto shortcut = down ? down[1]->as<torch::nn::BatchNorm2dImpl>()->forward(
                                         convolve(*down[0]->as<torch::nn::Conv2dImpl>(), x, m_levers.conv))
                                   : x;
        return batchNormRelu(*b3, convolve(*c3, h, m_levers.conv), shortcut, m_levers.norm);
    }
    Conv2d c1{nullptr}, c2{nullptr}, c3{nullptr};
    BatchNorm2d b1{nullptr}, b2{nullptr}, b3{nullptr};
    torch::nn::Sequential down{nullptr};
    Levers m_levers;
};
TORCH_MODULE(Bottleneck);

struct ResNet50 : Net {
    ResNet50(at::Generator initGen, Levers levers) {
        gen = std::move(initGen);
        fusedNorm = levers.norm;
        tunedConvs = levers.conv;
        stem = register_module("stem", conv(3, 64, 7, 2));
        bn = register_module("bn", BatchNorm2d(64));
        std::int64_t in = 64;
        const std::pair<std::int64_t, int> stages[] = {{64, 3}, {128, 4}, {256, 6}, {512, 3}};
        for (const auto& [width, count] : stages) {
            for (int b = 0; b < count; ++b) {
                blocks->push_back(Bottleneck(in, width, (b == 0 && width != 64) ? 2 : 1, levers));
                in = width * 4;
            }
        }
        register_module("blocks", blocks);
        fc = register_module("fc", torch::nn::Linear(2048, 1000));
        heInit(*this, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override {
        auto h = batchNormRelu(*bn, convolve(*stem, x, tunedConvs), {}, fusedNorm);
        h = F::max_pool2d(h, F::MaxPool2dFuncOptions(3).stride(2).padding(1));
        h = blocks->forward(h);
        return fc->forward(h.mean({2, 3}));
    }
    Conv2d stem{nullptr};
    BatchNorm2d bn{nullptr};
    torch::nn::Sequential blocks;
    torch::nn::Linear fc{nullptr};
};

constexpr OptimizerRecipe kSgd{.kind = OptimizerRecipe::Kind::Sgd};
constexpr OptimizerRecipe kSgdNesterov{.kind = OptimizerRecipe::Kind::Sgd, .nesterov = true};

WorkloadImpl cifarResNet(int depth) {
    const int n = (depth - 2) / 6;
    return {
        .info = {.name = "cifar-resnet" + std::to_string(depth),
                 .description = "He et al. CIFAR ResNet-" + std::to_string(depth) +
                                ": basic blocks, option-A shortcuts, SGD momentum, step schedule",
                 .dataset = "cifar10",
                 .origin = "He et al. 2015, arXiv:1512.03385, section 4.2",
                 .optimizer = "SGD(lr=0.1, momentum=0.9, wd=1e-4), x0.1 at 4/9, 6/9, 8/9 of the run",
                 .defaultBatch = 128,
                 .defaultLr = 0.1,
                 .weightDecay = 1e-4,
                 .momentum = 0.9,
                 .schedule = "step",
                 .defaultEpochs = 3,
                 .defaultTarget = 0.90,
                 .inputShape = {3, 32, 32},
                 .channelsLastOnCpu = true},
        .makeModel = [n](at::Generator g,
                         const ModelOptions& o) { return std::make_shared<CifarResNet>(n, std::move(g), leversOf(o)); },
        .optimizer = kSgd,
        .network = {{"depth", static_cast<double>(depth)}}};
}

} // namespace

std::vector<WorkloadImpl> resnetWorkloads() {
    return {
        cifarResNet(20),
        cifarResNet(32),
        cifarResNet(56),
        {.info = {.name = "davidnet",
                  .description = "DAWNBench ResNet-9 (DavidNet): batch 512, one-cycle LR, Nesterov SGD",
                  .dataset = "cifar10",
                  .origin = "myrtle.ai, How to train your ResNet (DAWNBench CIFAR-10, 2018)",
                  .optimizer = "SGD(peak lr=0.4, Nesterov momentum=0.9, wd=5e-4), one-cycle",
                  .defaultBatch = 512,
                  .defaultLr = 0.4,
                  .weightDecay = 5e-4,
                  .momentum = 0.9,
                  .schedule = "onecycle",
                  .defaultEpochs = 24,
                  .defaultTarget = 0.94,
                  .inputShape = {3, 32, 32},
                  .channelsLastOnCpu = true},
         .makeModel = [](at::Generator g,
                         const ModelOptions& o) { return std::make_shared<DavidNet>(std::move(g), leversOf(o)); },
         .optimizer = kSgdNesterov},
        {.info = {.name = "imagenet-resnet50",
                  .description = "ResNet-50 v1.5 at 224x224 (ImageNet shape; synthetic data by default)",
                  .dataset = "imagenet",
                  .origin = "torchvision resnet50 / NVIDIA DeepLearningExamples ResNet50 v1.5",
                  .optimizer = "SGD(lr=0.1, momentum=0.9, wd=1e-4), step schedule",
                  .defaultBatch = 64,
                  .defaultLr = 0.1,
                  .weightDecay = 1e-4,
                  .momentum = 0.9,
                  .schedule = "step",
                  .defaultEpochs = 1,
                  .defaultTarget = 0.76,
                  .inputShape = {3, 224, 224},
                  .classes = 1000,
                  .syntheticByDefault = true,
                  .channelsLastOnCpu = true},
         .makeModel = [](at::Generator g,
                         const ModelOptions& o) { return std::make_shared<ResNet50>(std::move(g), leversOf(o)); },
         .optimizer = kSgd},
    };
}

} // namespace devicerace::detail
