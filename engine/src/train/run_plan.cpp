#include "train/run_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"

namespace devicerace::detail {

namespace {

// Share of the GPU's memory a real data set may take before a lane keeps it on the host.
constexpr double kResidentShare = 0.25;
// Bytes of input an evaluation pass holds by default (1,000 Fashion-MNIST or CIFAR images, 20
// ImageNet ones), and at most this many examples.
constexpr std::int64_t kEvalInputBytes = 3072000;
constexpr std::int64_t kEvalMaxExamples = 1000;
constexpr std::int64_t kEvalMaxTokens = 32768;

std::string resolveDevice(const std::string& device) {
    if (device == "cpu") {
        return device;
    }
    const auto& report = deviceReport();
    const std::string name = device == "cuda" ? "cuda:0" : device;
    if (!report.cudaAvailable) {
        throw UsageError(fmt::format("device {}: CUDA is not available: {}", device, report.cudaUnavailableReason));
    }
    const int index = std::stoi(name.substr(5));
    if (index < 0 || index >= static_cast<int>(report.gpus.size())) {
        throw UsageError(fmt::format("device {}: this machine has {} CUDA device{} (cuda:0{})", device,
                                     report.gpus.size(), report.gpus.size() == 1 ? "" : "s",
                                     report.gpus.size() > 1 ? fmt::format(" to cuda:{}", report.gpus.size() - 1) : ""));
    }
    return name;
}

// The fast paths (kernels/fast_paths.h) and the CUDA lane's graph and data placement.
void planFastPaths(const LaneSpec& spec, const WorkloadInfo& workload, const PlanData& data, RunPlan& plan) {
    const bool cuda = plan.device != "cpu";
    if (spec.graph.value_or(false) && !cuda) {
        throw UsageError(fmt::format("lane {}: graph=true applies to CUDA lanes", spec.name));
    }
    if (spec.graph.value_or(false) && spec.precision == Precision::Fp16) {
        throw UsageError(fmt::format("lane {}: graph=true cannot capture fp16 loss scaling (it decides on the host "
                                     "whether to skip a step); use precision=bf16 or graph=false",
                                     spec.name));
    }
    if (spec.graph.value_or(false) && !spec.fused.value_or(true)) {
        throw UsageError(fmt::format("lane {}: graph=true needs fused=true (torch::optim keeps its step count on the "
                                     "host, which a captured graph cannot update)",
                                     spec.name));
    }
    if (spec.resident && !cuda) {
        throw UsageError(fmt::format("lane {}: resident= applies to CUDA lanes (a CPU lane's data is already in host "
                                     "memory)",
                                     spec.name));
    }
    if (spec.resident == false && data.synthetic) {
        throw UsageError(fmt::format("lane {}: resident=false applies to real data; synthetic data is generated on "
                                     "the GPU",
                                     spec.name));
    }
    plan.fast = decideFastPaths(spec, plan.device, plan.channelsLast, plan.fusedLstm);
    plan.cudaGraph = spec.graph.value_or(cuda && workload.cudaGraphByDefault && spec.precision != Precision::Fp16 &&
                                         plan.fast.optimizer && spec.lstm.value_or("fused") == "fused");
    bool resident = true;
    if (cuda && !data.synthetic) {
        const auto& gpus = deviceReport().gpus;
        const auto index = static_cast<std::size_t>(std::stoi(plan.device.substr(5)));
        resident = index >= gpus.size() ||
                   data.deviceBytes <= kResidentShare * static_cast<double>(gpus[index].totalMemoryBytes);
    }
    plan.dataOnHost = cuda && !spec.resident.value_or(resident);
}

} // namespace

} // namespace devicerace::detail

namespace devicerace {

std::string deviceProblem(const std::string& device) {
    try {
        detail::resolveDevice(device);
        return {};
    } catch (const std::exception& e) {
        return e.what();
    }
}

} // namespace devicerace

namespace devicerace::detail {

int defaultCpuThreads() { return std::max(1, deviceReport().cpu.physicalCores); }

RunPlan planRun(const LaneSpec& spec, const WorkloadInfo& workload, const PlanData& data, const PlanRun& run) {
    RunPlan plan;
    plan.device = resolveDevice(spec.device);
    const auto& cpu = deviceReport().cpu;
    if (spec.threads && *spec.threads > cpu.logicalCpus * kMaxThreadsPerCpu) {
        throw UsageError(fmt::format("lane {}: threads={} is far more than the {} CPUs present (at most {})", spec.name,
                                     *spec.threads, cpu.logicalCpus, cpu.logicalCpus * kMaxThreadsPerCpu));
    }
    if (spec.precision == Precision::Fp16 && plan.device == "cpu") {
        throw UsageError(fmt::format("lane {}: precision=fp16 needs a CUDA device; use bf16 on the CPU", spec.name));
    }
    if (spec.lstm && !workload.hasLstm) {
        throw UsageError(fmt::format("lane {}: lstm={} applies to the LSTM workloads (imdb-bilstm, charlstm), not {}",
                                     spec.name, *spec.lstm, workload.name));
    }
    if (spec.precision == Precision::Bf16 && plan.device == "cpu" && workload.hasLstm &&
        spec.lstm.value_or("fused") == "fused" && cpu.bf16Units.empty()) {
        throw UsageError(fmt::format("lane {}: precision=bf16 with lstm=fused needs a CPU with bf16 units (AMX or "
                                     "AVX-512 BF16): oneDNN has no bf16 LSTM on this one; use lstm=cells or fp32",
                                     spec.name));
    }
    if (spec.augment.value_or("none") != "none" && workload.input != DataKind::Images) {
        throw UsageError(fmt::format("lane {}: augment={} applies to image workloads, not {}", spec.name, *spec.augment,
                                     workload.name));
    }
    if (spec.channelsLast.value_or(false) && workload.input != DataKind::Images) {
        throw UsageError(
            fmt::format("lane {}: channels_last applies to image workloads, not {}", spec.name, workload.name));
    }
    plan.batch = spec.batch.value_or(workload.defaultBatch);
    const std::int64_t world = std::max(1, run.world);
    if (run.fixedGlobalBatch) {
        // global_batch=fixed: batch= is the lane's global batch, split over the ranks.
        if (plan.batch % world != 0) {
            throw UsageError(fmt::format("lane {}: global_batch=fixed splits batch={} over {} workers: make it a "
                                         "multiple of {}",
                                         spec.name, plan.batch, world, world));
        }
        plan.batch /= world;
    }
    if (plan.batch > data.trainCount) {
        throw UsageError(fmt::format("lane {}: batch={} is larger than the {} training examples", spec.name, plan.batch,
                                     data.trainCount));
    }
    plan.lr = spec.lr.value_or(workload.defaultLr);
    plan.weightDecay = spec.weightDecay.value_or(workload.weightDecay);
    plan.momentum = spec.momentum.value_or(workload.momentum);
    plan.schedule = spec.schedule.value_or(workload.schedule);
    plan.fusedLstm = spec.lstm.value_or("fused") == "fused";
    plan.augment = spec.augment.value_or("none") == "crop-flip";
    // NHWC convolutions (oneDNN) are the faster CPU layout for the workloads that say so
    // (measured: docs/BENCHMARKS.md): a per-workload CPU default.
    plan.channelsLast = spec.channelsLast.value_or(plan.device == "cpu" && workload.channelsLastOnCpu);
    planFastPaths(spec, workload, data, plan);
    std::int64_t exampleSize = 1;
    for (auto d : workload.inputShape) {
        exampleSize *= d;
    }
    // Language models: the activations, not the input, bound an evaluation batch (a 6-layer,
    // 384-wide block holds 4 x 384 floats per token): at most kEvalMaxTokens tokens.
    const std::int64_t evalExamples =
        workload.tokensPerSample > 0 ? kEvalMaxTokens / workload.tokensPerSample : kEvalInputBytes / exampleSize;
    plan.evalBatch =
        spec.evalBatch.value_or(std::max(plan.batch, std::min<std::int64_t>(kEvalMaxExamples, evalExamples)));
    plan.threads = spec.threads.value_or(plan.device == "cpu" ? defaultCpuThreads() : 1);
    if (run.distributed) {
        plan.cudaGraph = false; // the gradient hooks launch collectives from inside the backward pass
    }
    // Graph lanes drop an epoch's last partial batch (one captured batch shape); data-parallel
    // steps take world × batch examples.
    const std::int64_t stepBatch = plan.batch * world;
    plan.stepsPerEpoch = plan.cudaGraph ? data.trainCount / plan.batch : (data.trainCount + stepBatch - 1) / stepBatch;
    plan.totalSteps = run.steps ? *run.steps : plan.stepsPerEpoch * run.epochs.value_or(workload.defaultEpochs);
    if (plan.totalSteps < 1) {
        throw UsageError("a race needs at least 1 step (epochs and steps must be 1 or more)");
    }
    if (spec.fault) {
        plan.fault = Fault{spec.fault->kind, spec.fault->firingStep()};
        if (plan.fault.kind != "throw" && plan.fault.kind != "slow-data" && !run.allowProcessFaults) {
            throw UsageError(fmt::format("lane {}: fault={} would take down this whole process with every lane in it; "
                                         "add isolate=process",
                                         spec.name, spec.fault->text()));
        }
    }
    return plan;
}

} // namespace devicerace::detail
