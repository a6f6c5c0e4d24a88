// The foundation workloads: the Keras MNIST examples, trained on Fashion-MNIST.
#include "models.h"

#include <fmt/format.h>
#include <torch/nn/functional.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/rmsprop.h>

#include <cmath>

#include "devicerace/errors.h"

namespace devicerace::detail {

namespace F = torch::nn::functional;

torch::Tensor laneDropout(const torch::Tensor& x, double p, bool training, at::Generator& gen) {
    if (!training || p <= 0) {
        return x;
    }
    auto mask = at::empty_like(x).bernoulli_(1.0 - p, gen);
    return x * mask * (1.0 / (1.0 - p));
}

void glorotInit(torch::nn::Module& module, at::Generator& gen) {
    torch::NoGradGuard noGrad;
    for (auto& item : module.named_parameters(/*recurse=*/true)) {
        auto& p = item.value();
        if (p.dim() >= 2) {
            // fan_in = in * receptive field, fan_out = out * receptive field (Keras/PyTorch convention).
            const auto receptive = p[0][0].numel();
            const double fanIn = static_cast<double>(p.size(1) * receptive);
            const double fanOut = static_cast<double>(p.size(0) * receptive);
            const double bound = std::sqrt(6.0 / (fanIn + fanOut));
            p.uniform_(-bound, bound, gen);
        } else {
            p.zero_();
        }
    }
}

namespace {

// Keras examples/mnist_mlp.py: Dense 512 ReLU, Dropout 0.2, Dense 512 ReLU, Dropout 0.2, Dense 10.
struct MnistMlp : Net {
    explicit MnistMlp(at::Generator initGen) {
        gen = std::move(initGen);
        fc1 = register_module("fc1", torch::nn::Linear(784, 512));
        fc2 = register_module("fc2", torch::nn::Linear(512, 512));
        fc3 = register_module("fc3", torch::nn::Linear(512, 10));
        glorotInit(*this, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override {
        // Dropout rate of the Keras example.
        constexpr double kDrop = 0.2;
        auto h = x.flatten(1);
        h = laneDropout(fc1->forward(h).relu_(), kDrop, is_training(), gen);
        h = laneDropout(fc2->forward(h).relu_(), kDrop, is_training(), gen);
        return fc3->forward(h);
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// Keras examples/mnist_cnn.py: Conv 32 3x3 ReLU, Conv 64 3x3 ReLU, MaxPool 2, Dropout 0.25,
// Dense 128 ReLU, Dropout 0.5, Dense 10.
struct MnistCnn : Net {
    explicit MnistCnn(at::Generator initGen) {
        gen = std::move(initGen);
        conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
        conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
        fc1 = register_module("fc1", torch::nn::Linear(64 * 12 * 12, 128));
        fc2 = register_module("fc2", torch::nn::Linear(128, 10));
        glorotInit(*this, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override {
        auto h = conv1->forward(x).relu_();
        h = conv2->forward(h).relu_();
        h = F::max_pool2d(h, F::MaxPool2dFuncOptions(2));
        h = laneDropout(h, 0.25, is_training(), gen).flatten(1);
        h = laneDropout(fc1->forward(h).relu_(), 0.5, is_training(), gen);
        return fc2->forward(h);
    }
    torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

std::int64_t countParameters(const ModelFactory& make) {
    auto model = make(at::detail::createCPUGenerator(0));
    std::int64_t n = 0;
    for (const auto& p : model->parameters()) {
        n += p.numel();
    }
    return n;
}

std::vector<WorkloadImpl> buildRegistry() {
    std::vector<WorkloadImpl> list;

    WorkloadImpl mlp;
    mlp.info.name = "fashion-mlp";
    mlp.info.description = "Keras mnist_mlp: 784-512-512-10 MLP with dropout, RMSprop";
    mlp.info.dataset = "fashion-mnist";
    mlp.info.origin = "keras-team/keras examples/mnist_mlp.py";
    mlp.info.optimizer = "RMSprop(lr=1e-3, alpha=0.9, eps=1e-7)";
    mlp.info.defaultBatch = 128;
    mlp.info.defaultLr = 1e-3;
    mlp.info.defaultEpochs = 2;
    mlp.info.defaultTarget = 0.85;
    mlp.makeModel = [](at::Generator g) { return std::make_shared<MnistMlp>(std::move(g)); };
    mlp.makeOptimizer = [](std::vector<torch::Tensor> params, double lr) {
        // Keras RMSprop defaults: rho 0.9, epsilon 1e-7.
        return std::make_unique<torch::optim::RMSprop>(std::move(params),
                                                       torch::optim::RMSpropOptions(lr).alpha(0.9).eps(1e-7));
    };
    list.push_back(std::move(mlp));

    WorkloadImpl cnn;
    cnn.info.name = "fashion-cnn";
    cnn.info.description = "Keras mnist_cnn: two 3x3 convs, max-pool, dense 128, dropout, Adam";
    cnn.info.dataset = "fashion-mnist";
    cnn.info.origin = "keras-team/keras examples/mnist_cnn.py";
    cnn.info.optimizer = "Adam(lr=1e-3)";
    cnn.info.defaultBatch = 128;
    cnn.info.defaultLr = 1e-3;
    cnn.info.defaultEpochs = 3;
    cnn.info.defaultTarget = 0.89;
    cnn.makeModel = [](at::Generator g) { return std::make_shared<MnistCnn>(std::move(g)); };
    cnn.makeOptimizer = [](std::vector<torch::Tensor> params, double lr) {
        return std::make_unique<torch::optim::Adam>(std::move(params), torch::optim::AdamOptions(lr));
    };
    list.push_back(std::move(cnn));

    for (auto& w : list) {
        w.info.parameters = countParameters(w.makeModel);
    }
    return list;
}

const std::vector<WorkloadImpl>& registry() {
    static const std::vector<WorkloadImpl> list = buildRegistry();
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

const std::vector<WorkloadInfo>& workloads() {
    static const std::vector<WorkloadInfo> infos = [] {
        std::vector<WorkloadInfo> out;
        for (const auto& name : {"fashion-mlp", "fashion-cnn"}) {
            out.push_back(detail::workloadImpl(name).info);
        }
        return out;
    }();
    return infos;
}

const WorkloadInfo& findWorkload(const std::string& name) {
    for (const auto& w : workloads()) {
        if (w.name == name) {
            return w;
        }
    }
    return detail::workloadImpl(name).info; // throws the UsageError listing the known names
}

} // namespace devicerace
