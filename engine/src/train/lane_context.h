#pragma once
// What the lane thread's training loop shares with the Lane object. Torch-free.
#include <atomic>
#include <functional>
#include <string>

#include "devicerace/lane.h"
#include "train/fault.h"

namespace devicerace::detail {

struct LaneContext {
    LaneSpec spec;              // name and device resolved
    LaneRunSettings settings;
    std::int64_t batch = 0;     // resolved
    double lr = 0;              // resolved
    int threads = 1;            // resolved CPU intra-op threads
    std::int64_t stepsPerEpoch = 0;
    std::int64_t totalSteps = 0;
    std::int64_t evalBatch = 1000; // examples per evaluation pass
    double weightDecay = 0;
    double momentum = 0;
    std::string schedule = "constant";
    bool fusedLstm = true;
    bool channelsLast = false;
    bool fusedOptimizer = true; // multi-tensor optimizer kernels (lane key fused)
    bool cudaGraph = false;     // capture the step in a CUDA graph (lane key graph); implies drop-last
    bool dataOnHost = false;    // resident=false: pinned host data, prefetched batches
    Fault fault;                // tests: what to inject, at which step (fault=)

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
