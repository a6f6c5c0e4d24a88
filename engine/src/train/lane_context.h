#pragma once
// What the lane thread's training loop shares with the Lane object. Torch-free.
#include <atomic>
#include <functional>
#include <string>

#include "devicerace/lane_spec.h"
#include "devicerace/metric_sample.h"
#include "devicerace/run_settings.h"
#include "train/run_plan.h"

namespace devicerace::detail {

/// The plan (batch, threads, steps, fast paths: train/run_plan.h) plus what the lane thread
/// shares with the Lane object.
struct LaneContext : RunPlan {
    LaneSpec spec; // name and device resolved
    LaneRunSettings settings;

    std::atomic<bool> stopRequested{false};
    std::atomic<bool> pauseRequested{false};
    /// Blocks while paused (or until stop); returns the seconds spent waiting.
    std::function<double()> waitWhilePaused;
    /// Hands a sample to the lane's buffer (thread-safe).
    std::function<void(MetricSample)> emit;
    /// Reports how the lane actually trains ("fused Adam, CUDA graph, ..."; thread-safe).
    std::function<void(std::string)> describeExecution;
};

struct LaneOutcome {
    LaneState state = LaneState::Finished;
    std::string message; // for Diverged / Stopped
};

/// Runs the whole training job in the calling (lane) thread. Throws on errors.
LaneOutcome runTraining(LaneContext& ctx);

/// A user-readable message for any exception (no C++ backtraces).
std::string describeException(std::exception_ptr e);

} // namespace devicerace::detail
