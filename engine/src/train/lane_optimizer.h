#pragma once
// The optimizers a lane steps: the plain torch::optim classes (one parameter at a time, a
// host-side step count) or the multi-tensor fast paths (fused Adam/SGD kernels, foreach
// RMSprop) that update every parameter in a few kernels and keep all state on the device,
// so a step needs no host value and can be captured in a CUDA graph. Lane thread only.
#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

#include "models/optimizer_recipe.h"
#include "train/fused/flat_params.h"

namespace devicerace::detail {

/// Hyperparameters of the workload's optimizer, resolved for one lane.
struct OptimizerSettings {
    double lr = 1e-3;
    double weightDecay = 0;
    double momentum = 0;
};

class LaneOptimizer {
public:
    virtual ~LaneOptimizer() = default;
    /// The learning rate of the next step. Cheap when unchanged.
    virtual void setLr(double lr) = 0;
    virtual void zeroGrad() = 0;
    virtual void step() = 0;
    /// True when step() issues only device work (no host reads): safe inside a CUDA graph.
    virtual bool captureSafe() const = 0;
    /// "fused Adam", "foreach RMSprop", "torch::optim SGD" ... (shown in the lane's summary).
    virtual std::string describe() const = 0;
    /// True when a step may instead be stepRange() calls that cover every parameter once (a
    /// flat optimizer whose update is elementwise: the fused step updates each slice right after
    /// its gradient is written, on the thread that wrote it).
    virtual bool steppedInRanges() const { return false; }
    /// Steps the flat parameters [begin, end) only; concurrent calls take disjoint ranges.
    virtual void stepRange(std::int64_t /*begin*/, std::int64_t /*end*/) {}
};

/// `fast`: the multi-tensor path (fused/foreach kernels); otherwise torch::optim.
std::unique_ptr<LaneOptimizer> makeLaneOptimizer(const OptimizerRecipe& recipe, std::vector<at::Tensor> params,
                                                 const OptimizerSettings& settings, bool fast);

/// The optimizer of a fused step (train/fused/fused_step.h): one flat parameter tensor and its
/// gradient, which the step writes (zeroGrad does nothing). The recipe's gradient clipping on
/// the whole buffer first; RMSprop and AdamW in one pass that also rewrites the bf16 mirror when
/// defined (AdamW: torch's fused arithmetic, the clipping inside); Adam and SGD through
/// PyTorch's fused kernels on the flat tensor, then the mirror. A
/// recipe that decays matrices only decays params [0, decayedCount) (FusedStep::decayedCount;
/// -1 throws then). CPU only.
std::unique_ptr<LaneOptimizer> makeFlatOptimizer(const OptimizerRecipe& recipe, const FlatParams& flat,
                                                 const OptimizerSettings& settings, std::int64_t decayedCount = -1);

} // namespace devicerace::detail
