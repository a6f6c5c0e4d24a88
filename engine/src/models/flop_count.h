#pragma once
// FLOPs per training example, counted from the network (utilisation): one forward
// and backward pass of the workload's model on the CPU, at a small batch, with a RecordFunction
// observer that adds up the matrix products the dispatcher runs — mm/addmm/bmm/baddbmm,
// convolutions and their backward, scaled-dot-product attention and its backward — from their
// operand shapes, the way torch.utils.flop_counter.FlopCounterMode counts. A multiply-add is two
// FLOPs. Elementwise work (activations, norms, the optimizer) is not counted, as in every
// published figure. Lane thread or any thread; the counting pass is thread-local.
#include <cstdint>
#include <map>
#include <string>

#include "models/models.h"

namespace devicerace::detail {

struct FlopCount {
    double forward = 0;                 // per example
    double backward = 0;                // per example
    std::map<std::string, double> byOp; // "aten::addmm" -> FLOPs per example, forward and backward
    double perExample() const { return forward + backward; }
};

/// Counts one training step of `workload` (built with `options`) at `batch` examples, on the
/// CPU, in fp32. Deterministic; the model is a throw-away instance (the lane's is untouched).
FlopCount countTrainingFlops(const std::string& workload, const ModelOptions& options, std::int64_t batch = 2);

/// countTrainingFlops(...).perExample(), remembered per workload and options for the process.
double trainingFlopsPerExample(const std::string& workload, const ModelOptions& options);

} // namespace devicerace::detail
