#pragma once
// What the trainer asks of a hand-fused CPU training step (train/fused/dense_step.h for stacks of
// dense layers, train/fused/gpt_step.h for the GPT decoder): forward, loss, backward and the optimizer
// without autograd, the parameters in one flat buffer that the model's own tensors view (so
// evaluation, sampling, checkpoints and digests see them), stepped by a flat optimizer
// (train/lane_optimizer.h: makeFlatOptimizer). Lane thread only.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devicerace/lane_spec.h"
#include "train/fused/flat_params.h"

namespace devicerace::detail {

class StepTimer;
class LaneOptimizer;

class FusedStep {
public:
    virtual ~FusedStep() = default;

    /// What keeps any fused step off a lane, whatever its network (nullopt: nothing): the lane's
    /// fused=false, a device that is not the CPU, a data-parallel rank, fp16.
    static std::optional<std::string> whyNotAny(const c10::Device& dev, Precision precision, bool distributed,
                                                bool fused) {
        if (!fused) {
            return "fused=false";
        }
        if (!dev.is_cpu()) {
            return "not a CPU lane";
        }
        if (distributed) {
            return "a data-parallel rank";
        }
        if (precision == Precision::Fp16) {
            return "fp16";
        }
        return std::nullopt;
    }

    /// The flat fp32 parameters, their gradients (the step writes every gradient each step) and
    /// the bf16 mirror the GEMMs read (undefined for fp32), which the optimizer rewrites.
    virtual FlatParams& flat() = 0;
    /// Parameters [0, n) take the weight decay of a recipe that decays matrices only; the rest
    /// (biases, LayerNorm gains) none. -1: the step keeps no such order.
    virtual std::int64_t decayedCount() const { return -1; }

    /// One step on a batch as the lane stores it (`x` the input, `y` the targets): fills `loss`
    /// (the mean, 0-dim float) and `correct` (0-dim int64) and steps `optimizer`. `timer`
    /// (optional) gets the phase marks.
    virtual void step(const at::Tensor& x, const at::Tensor& y, at::Generator& gen, LaneOptimizer& optimizer,
                      at::Tensor& loss, at::Tensor& correct, StepTimer* timer) = 0;

    /// The summed loss and the right predictions of an evaluation pass.
    struct Evaluation {
        double lossSum = 0;
        std::int64_t correct = 0;
    };
    /// Evaluates a batch as the lane stores it by the step's own forward (no dropout, nothing
    /// learned); nullopt where the step does not, and the module evaluates.
    virtual std::optional<Evaluation> evaluate(const at::Tensor& /*x*/, const at::Tensor& /*y*/) {
        return std::nullopt;
    }
    /// Whether evaluate() evaluates (the lane's batches of its own workload).
    virtual bool evaluates() const { return false; }

    /// "fused dense step (bf16 GEMMs, fp32 master weights)" and the like (the lane's execution).
    virtual std::string describe() const = 0;
    /// How several threads share a step; empty on one thread.
    virtual std::string describeThreads() const = 0;
    /// Each intra-op thread's speed relative to the fastest (1), as the step's work shares have
    /// found it; empty where the step does not measure it (one thread, fixed shares).
    virtual std::vector<double> threadSpeeds() const { return {}; }
};

} // namespace devicerace::detail
