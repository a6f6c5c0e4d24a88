#pragma once
// What a DeviceRace-engine lane will do, decided from its spec, its workload and the size of its
// data, before anything trains: the one place that decides a lane's batch, threads, step count,
// evaluation batch and fast paths, and refuses a lane that cannot run. Used by the thread lane
// that trains it and by resolveRace, which plans a whole race without loading data. Torch-free,
// thread-safe.
#include <cstdint>
#include <optional>
#include <string>

#include "devicerace/lane_spec.h"
#include "devicerace/workload.h"
#include "kernels/fast_paths.h"
#include "train/fault.h"

namespace devicerace::detail {

/// Most threads a lane may ask for, as a multiple of the logical CPUs (oversubscription must be
/// asked for explicitly, but not absurdly).
inline constexpr int kMaxThreadsPerCpu = 4;

/// The data a lane will see, as far as planning needs it.
struct PlanData {
    std::int64_t trainCount = 0;
    bool synthetic = false;
    double deviceBytes = 0; // the data set's size on a device (decides resident=)
};

/// What the race asks of every lane, and where this one runs.
struct PlanRun {
    std::optional<int> epochs;
    std::optional<std::int64_t> steps;
    bool distributed = false;        // one rank of a data-parallel lane (no CUDA graph: collectives in backward)
    int world = 1;                   // its ranks (each takes `batch` a step)
    bool fixedGlobalBatch = false;   // batch= is the lane's global batch, split over the ranks
    bool allowProcessFaults = false; // the lane is alone in its process (a worker)
};

/// A lane's resolved settings (the unset keys take the workload's defaults).
struct RunPlan {
    std::string device = "cpu"; // "cpu" or "cuda:N" ("cuda" resolved)
    std::int64_t batch = 0;     // per rank
    double lr = 0;
    int threads = 1; // CPU intra-op threads
    std::int64_t stepsPerEpoch = 0;
    std::int64_t totalSteps = 0;
    std::int64_t evalBatch = 1000; // examples per evaluation pass
    double weightDecay = 0;
    double momentum = 0;
    std::string schedule = "constant";
    bool fusedLstm = true;
    bool channelsLast = false;
    bool augment = false;    // augment=crop-flip: each training batch cropped and flipped per example
    FastPaths fast;          // which fast paths the lane takes (lane key fused; kernels/fast_paths.h)
    bool cudaGraph = false;  // capture the step in a CUDA graph (lane key graph); implies drop-last
    bool dataOnHost = false; // resident=false: pinned host data, prefetched batches
    Fault fault;             // tests: what to inject, at which step (fault=)
};

/// The thread count a CPU lane takes when it names none and no race shared the cores: every
/// physical core of this machine. The one default (resolveRace shares the cores of a live race).
int defaultCpuThreads();

/// Plans one lane; throws UsageError naming the lane and the key for anything it cannot run
/// (no such CUDA device, fp16 on a CPU, graph=true without fused, a batch larger than the data...).
RunPlan planRun(const LaneSpec& spec, const WorkloadInfo& workload, const PlanData& data, const PlanRun& run);

} // namespace devicerace::detail
