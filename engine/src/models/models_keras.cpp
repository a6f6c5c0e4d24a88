// Networks from the Keras examples the seed posts benchmark (../shared/seeds/003_*):
// mnist_mlp, mnist_cnn (on Fashion-MNIST), cifar10_cnn and imdb_fasttext.
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include "models/models.h"

namespace devicerace::detail {

namespace {

// keras-team/keras examples/mnist_mlp.py: Dense 512 ReLU, Dropout 0.2, Dense 512 ReLU, Dropout 0.2, Dense 10.
struct MnistMlp : Net {
    MnistMlp(at::Generator initGen, const FastPaths& fast) {
        gen = std::move(initGen);
        hashedDropout = fast.hashedDropout;
        // bf16: the layers' GEMMs by their routes where the module computes (an evaluation of the
        // fused dense step, or training by autograd), not autocast's oneDNN bf16 linear
        denseRoutes = denseRoutesFor(fast);
        fc1 = register_module("fc1", torch::nn::Linear(784, 512));
        fc2 = register_module("fc2", torch::nn::Linear(512, 512));
        fc3 = register_module("fc3", torch::nn::Linear(512, 10));
        glorotInit(*this, gen);
    }
    // Dropout rate of the Keras example.
    static constexpr double kDrop = 0.2;
    torch::Tensor forward(const torch::Tensor& x) override {
        auto h = x.flatten(1);
        h = laneDropout(dense(*fc1, h, denseRoutes.get()).relu_(), kDrop, is_training(), gen, hashedDropout);
        h = laneDropout(dense(*fc2, h, denseRoutes.get()).relu_(), kDrop, is_training(), gen, hashedDropout);
        return dense(*fc3, h, denseRoutes.get());
    }
    std::vector<DenseLayerView> denseStack() override {
        return {{fc1->weight, fc1->bias, true, kDrop}, {fc2->weight, fc2->bias, true, kDrop}, {fc3->weight, fc3->bias}};
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// keras-team/keras examples/mnist_cnn.py: Conv 32 3x3 ReLU, Conv 64 3x3 ReLU, MaxPool 2, Dropout 0.25,
// Dense 128 ReLU, Dropout 0.5, Dense 10.
struct MnistCnn : Net {
    MnistCnn(at::Generator initGen, const FastPaths& fast) {
        gen = std::move(initGen);
        fusedPool = fast.reluPool;
        tunedConvs = fast.convWeightGrad;
        hashedDropout = fast.hashedDropout;
        denseRoutes = denseRoutesFor(fast);
        conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
        conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
        fc1 = register_module("fc1", torch::nn::Linear(64 * 12 * 12, 128));
        fc2 = register_module("fc2", torch::nn::Linear(128, 10));
        glorotInit(*this, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override {
        auto h = convolveRelu(*conv1, x, tunedConvs);
        h = convolveReluPool(*conv2, h, tunedConvs, 0.25, is_training(), gen, fusedPool, hashedDropout, true)
                .flatten(1);
        h = laneDropout(dense(*fc1, h, denseRoutes.get()).relu_(), 0.5, is_training(), gen, hashedDropout);
        return dense(*fc2, h, denseRoutes.get());
    }
    torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// keras-team/keras examples/cifar10_cnn.py: Conv32 same, Conv32, MaxPool, Dropout .25, Conv64 same,
// Conv64, MaxPool, Dropout .25, Dense 512, Dropout .5, Dense 10 (1,250,858 parameters).
struct CifarVgg : Net {
    CifarVgg(at::Generator initGen, const FastPaths& fast) {
        gen = std::move(initGen);
        fusedPool = fast.reluPool;
        tunedConvs = fast.convWeightGrad;
        hashedDropout = fast.hashedDropout;
        denseRoutes = denseRoutesFor(fast);
        using O = torch::nn::Conv2dOptions;
        c1 = register_module("c1", torch::nn::Conv2d(O(3, 32, 3).padding(1)));
        c2 = register_module("c2", torch::nn::Conv2d(O(32, 32, 3)));
        c3 = register_module("c3", torch::nn::Conv2d(O(32, 64, 3).padding(1)));
        c4 = register_module("c4", torch::nn::Conv2d(O(64, 64, 3)));
        fc1 = register_module("fc1", torch::nn::Linear(64 * 6 * 6, 512));
        fc2 = register_module("fc2", torch::nn::Linear(512, 10));
        glorotInit(*this, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override {
        auto h = convolveRelu(*c1, x, tunedConvs);
        h = convolveReluPool(*c2, h, tunedConvs, 0.25, is_training(), gen, fusedPool, hashedDropout);
        h = convolveReluPool(*c4, convolveRelu(*c3, h, tunedConvs), tunedConvs, 0.25, is_training(), gen, fusedPool,
                             hashedDropout, true)
                .flatten(1);
        h = laneDropout(dense(*fc1, h, denseRoutes.get()).relu_(), 0.5, is_training(), gen, hashedDropout);
        return dense(*fc2, h, denseRoutes.get());
    }
    torch::nn::Conv2d c1{nullptr}, c2{nullptr}, c3{nullptr}, c4{nullptr};
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// keras-team/keras examples/imdb_fasttext.py (unigrams): Embedding 20000 x 50, global average
// pooling, Dense 1 sigmoid (1,000,051 parameters).
struct FastText : Net {
    explicit FastText(at::Generator initGen) {
        gen = std::move(initGen);
        embed = register_module("embed", torch::nn::Embedding(20000, 50));
        fc = register_module("fc", torch::nn::Linear(50, 1));
        torch::NoGradGuard noGrad;
        embed->weight.uniform_(-0.05, 0.05, gen); // Keras' embedding initialiser
        glorotInit(*fc, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override { return fc->forward(embed->forward(x).mean(1)); }
    torch::nn::Embedding embed{nullptr};
    torch::nn::Linear fc{nullptr};
};

// Keras RMSprop defaults: rho 0.9, epsilon 1e-7.
constexpr OptimizerRecipe kKerasRmsprop{.kind = OptimizerRecipe::Kind::RmsProp, .alpha = 0.9, .eps = 1e-7};
constexpr OptimizerRecipe kAdam{};

} // namespace

std::vector<WorkloadImpl> kerasWorkloads() {
    return {
        {.info = {.name = "fashion-mlp",
                  .description = "Keras mnist_mlp: 784-512-512-10 MLP with dropout, RMSprop",
                  .dataset = "fashion-mnist",
                  .origin = "keras-team/keras examples/mnist_mlp.py",
                  .optimizer = "RMSprop(lr=1e-3, alpha=0.9, eps=1e-7)",
                  .defaultEpochs = 2,
                  .defaultTarget = 0.85,
                  .inputShape = {1, 28, 28}},
         .makeModel = [](at::Generator g,
                         const ModelOptions& o) { return std::make_shared<MnistMlp>(std::move(g), o.fast); },
         .optimizer = kKerasRmsprop},
        {.info = {.name = "fashion-cnn",
                  .description = "Keras mnist_cnn: two 3x3 convs, max-pool, dense 128, dropout, Adam",
                  .dataset = "fashion-mnist",
                  .origin = "keras-team/keras examples/mnist_cnn.py",
                  .optimizer = "Adam(lr=1e-3)",
                  .defaultEpochs = 3,
                  .defaultTarget = 0.89,
                  .inputShape = {1, 28, 28},
                  // NHWC on CPUs: the one-pass relu + pool writes the flatten's NCHW itself, so
                  // channels_last is the faster layout here (docs/BENCHMARKS.md).
                  .channelsLastOnCpu = true},
         .makeModel = [](at::Generator g,
                         const ModelOptions& o) { return std::make_shared<MnistCnn>(std::move(g), o.fast); },
         .optimizer = kAdam},
        {.info = {.name = "cifar-vgg",
                  .description = "Keras cifar10_cnn: 4 convs, 2 max-pools, dense 512, dropout, RMSprop",
                  .dataset = "cifar10",
                  .origin = "keras-team/keras examples/cifar10_cnn.py",
                  .optimizer = "RMSprop(lr=1e-4, alpha=0.9, eps=1e-7)",
                  .defaultBatch = 32,
                  .defaultLr = 1e-4,
                  .defaultEpochs = 10,
                  .defaultTarget = 0.70,
                  .inputShape = {3, 32, 32},
                  .channelsLastOnCpu = true},
         .makeModel = [](at::Generator g,
                         const ModelOptions& o) { return std::make_shared<CifarVgg>(std::move(g), o.fast); },
         .optimizer = kKerasRmsprop},
        {.info = {.name = "fasttext",
                  .description = "Keras imdb_fasttext: word embeddings averaged, one sigmoid unit (IMDb sentiment)",
                  .dataset = "imdb",
                  .origin = "keras-team/keras examples/imdb_fasttext.py",
                  .optimizer = "Adam(lr=1e-3)",
                  .defaultBatch = 32,
                  .defaultEpochs = 5,
                  .defaultTarget = 0.88,
                  .input = DataKind::Tokens,
                  .inputShape = {400}, // maxlen of the example
                  .classes = 2,
                  .vocabulary = 20000,
                  .syntheticByDefault = true},
         .task = Task::Binary,
         .makeModel = [](at::Generator g, const ModelOptions&) { return std::make_shared<FastText>(std::move(g)); },
         .optimizer = kAdam},
    };
}

} // namespace devicerace::detail
