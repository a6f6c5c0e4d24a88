#pragma once
// The workload zoo's networks and their optimizers. Lane thread only: a model belongs
// to the lane that built it.
#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>

#include "devicerace/workload.h"

namespace devicerace::detail {

/// A classifier: images in [0,1] (N,C,H,W) -> logits (N,classes).
struct Net : torch::nn::Module {
    virtual torch::Tensor forward(const torch::Tensor& x) = 0;
    /// Source of dropout masks; must live on the model's device (set after moving the model).
    at::Generator gen;
};

/// Builds a network with weights drawn from `gen` (the lane's own generator, so two lanes
/// with one seed start identically); dropout masks also come from `gen`.
using ModelFactory = std::function<std::shared_ptr<Net>(at::Generator gen)>;
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor> params, double lr)>;

struct WorkloadImpl {
    WorkloadInfo info;
    ModelFactory makeModel;
    OptimizerFactory makeOptimizer;
};

/// Throws UsageError for unknown names.
const WorkloadImpl& workloadImpl(const std::string& name);

/// Dropout whose masks come from the lane's generator (torch::nn::Dropout uses the global one).
torch::Tensor laneDropout(const torch::Tensor& x, double p, bool training, at::Generator& gen);

/// Keras' default initialisation (Glorot uniform weights, zero biases), drawn from `gen`.
void glorotInit(torch::nn::Module& module, at::Generator& gen);

} // namespace devicerace::detail
