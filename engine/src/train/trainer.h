#pragma once
// The training loop of one lane, as a class shared by its parts: trainer.cpp (set-up and the
// loop), trainer_step.cpp (one step: eager, CUDA graph, fp16 scaling), trainer_report.cpp
// (report points, evaluation, samples). Lane thread only. Timing rules: see
// ../shared/design/ARCHITECTURE.md — no host sync per step, CUDA synchronised only at
// report points, evaluation on the lane clock but outside throughput intervals.
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/loss.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "devicerace/errors.h"
#include "train/fused/fused_step.h"
#include "train/dist_group.h"
#include "kernels/host_allocator.h"
#include "train/lane_context.h"
#include "train/lane_optimizer.h"
#include "data/lane_data.h"
#include "train/memory_tracker.h"
#include "train/step_timer.h"
#include "devices/energy.h"
#include "devices/machine_load.h"
#include "devicerace/workload.h"
#include "models/models.h"

namespace devicerace::detail {

using Clock = std::chrono::steady_clock;

// Steps buffered on the device between report points; a report is forced when full.
inline constexpr std::int64_t kStepBuffer = 4096;
// Eager steps before a CUDA graph is captured: cuDNN autotuning, lazy initialisation and the
// optimizer's first step (SGD's momentum buffers start as a gradient) stay out of the graph.
inline constexpr std::int64_t kGraphWarmupSteps = 3;
// Characters generated at each charlstm evaluation, and the sampling temperature.
inline constexpr int kSampleChars = 200;
inline constexpr double kSampleTemperature = 0.5;
// Language models: characters written at each evaluation from one fixed prompt and seed.
inline constexpr int kLmSampleChars = 120;
inline constexpr double kLmSampleTemperature = 0.8;
// A lane whose training loss exceeds this multiple of its first value is declared diverged.
inline constexpr double kDivergenceFactor = 1000.0;

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

inline double wallClockNow() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Turns autocast on for the lane's thread while alive (forward + loss only, never backward).
class AutocastScope {
public:
    AutocastScope(Precision p, c10::DeviceType device) : m_device(device) {
        if (p == Precision::Fp32) {
            return;
        }
        m_active = true;
        at::autocast::set_autocast_dtype(device, p == Precision::Bf16 ? at::kBFloat16 : at::kHalf);
        at::autocast::set_autocast_enabled(device, true);
    }
    ~AutocastScope() {
        if (m_active) {
            at::autocast::set_autocast_enabled(m_device, false);
        }
    }
    AutocastScope(const AutocastScope&) = delete;
    AutocastScope& operator=(const AutocastScope&) = delete;

private:
    c10::DeviceType m_device;
    bool m_active = false;
};

class Trainer {
public:
    explicit Trainer(LaneContext& ctx) : m_ctx(ctx), m_dev(ctx.spec.device) {}

    LaneOutcome run();

    /// The lane's message for a HostOutOfMemory that ended run(): "out of memory at step N
    /// (batch B): ...; try batch <= K".
    std::string hostOutOfMemoryMessage() const;

private:
    LaneOutcome loop();

    torch::Tensor lossOf(const torch::Tensor& logits, const torch::Tensor& y, bool sum) const;

    torch::Tensor correctOf(const torch::Tensor& logits, const torch::Tensor& y) const;

    // Language models: splits a batch of T+1-token examples into inputs and next-token targets.
    void splitTargets(torch::Tensor& x, torch::Tensor& y) const;
    // Targets scored per example: T for a language model, else 1 (accuracy and loss denominators).
    std::int64_t targetsPerExample() const;

    struct StepOutput {
        torch::Tensor loss, correct; // 0-dim, on the device
    };

    // One training step on the batch `idx` (rows of the training set; on the host when the
    // data is), eager or replayed from the captured graph.
    void trainStep(const torch::Tensor& idx);

    StepOutput computeStep(const torch::Tensor& rawX, const torch::Tensor& y);

    void setUpFusedStep(const OptimizerSettings& opt);

    // Records forward, backward and the optimizer step of one batch as a CUDA graph: every
    // later step is one launch. The gradients are allocated inside the graph's memory pool and
    // rewritten in place by each replay; dropout draws from the lane's registered generator.
    void capture(const torch::Tensor& x, const torch::Tensor& y);

    // fp16 needs dynamic loss scaling; skipping a step on overflow needs the flag on the host,
    // so fp16 lanes sync once per step (prefer bf16, which needs none).
    void fp16Step(const torch::Tensor& loss);

    // Reads the buffered step results once (the only host sync in steady state) and emits a
    // Train sample. Returns an outcome when the loss became non-finite.
    std::optional<LaneOutcome> report();

    void evaluate();
    /// The fused step evaluates the lane (its own forward), not the module.
    bool fusedEvaluation() const;
    // A new throughput interval: after an evaluation or a pause (neither counts in one).
    void restartInterval();

    // Generates text from a test window, one character at a time (the Keras example's loop),
    // sampling with the lane's generator. Called inside evaluate() (no gradients, eval mode).
    std::string sampleText();
    // A language model's continuation of a newline (nanoGPT sample.py's start), or of the
    // validation text's first character, drawn with a generator seeded by the lane's seed at
    // every evaluation: the same weights write the same text.
    std::string sampleLanguageModel();

    void describeExecution();

    // What utilisation and energy need: the FLOPs counted from the network, the
    // device's peak, the energy meter. Never throws: what cannot be known stays unset.
    void setUpExplanation(const ModelOptions& options);

    void writeWeightsDigest() const;

    MetricSample base(SampleKind kind) const;

    std::optional<std::uint64_t> peakMemory() const;

    void emitState(LaneState state, std::string message);

    LaneContext& m_ctx;
    const WorkloadImpl* m_workload = nullptr;
    torch::Device m_dev;
    at::Generator m_gen;
    std::shared_ptr<Net> m_model;
    std::unique_ptr<LaneOptimizer> m_optimizer;
    // CPU lanes of dense networks and GPTs: the hand-fused step (train/fused/fused_step.h), its outputs.
    std::unique_ptr<FusedStep> m_fusedStep;
    bool m_fusedEvaluation = false;     // the fused step evaluates (DEVICERACE_FUSED_EVAL read once, with the step)
    bool m_evalRoutesDescribed = false; // a fused step's evaluation has chosen its dense layers' routes
    torch::Tensor m_fusedLoss, m_fusedCorrect;
    std::string m_fusedStepOff; // why a dense network or GPT does not take it (shown in the execution)
    // A bf16 CPU lane on a CPU whose bf16 peak measured below its fp32 one: "bf16 slower than fp32
    // on this CPU (…)", shown in the execution text (and read by the race's bf16 why-line).
    std::string m_bf16SlowerNote;
    DeviceData m_data;
    at::Generator m_hostGen;                  // epoch permutations (on the host)
    at::Generator m_augmentGen;               // augment=crop-flip: its crops and flips (on the host)
    std::unique_ptr<PinnedBatcher> m_batcher; // resident=false
    torch::Tensor m_batchX, m_batchY;         // the reused device batch (graph or resident=false)
    std::unique_ptr<at::cuda::CUDAGraph> m_graph;
    StepOutput m_graphOutput; // the captured step's outputs, rewritten by each replay
    const CpuMemoryTracker* m_cpuMemory = nullptr;
    torch::Tensor m_lossBuf, m_correctBuf;
    torch::Tensor m_scale, m_growth, m_foundInf; // fp16 loss scaling
    std::int64_t m_inBuf = 0;
    std::int64_t m_step = 0, m_samples = 0, m_epochsDone = 0;
    bool m_dataLoaded = false; // for the out-of-memory message: loading data, or a step
    std::int64_t m_reportedStep = 0, m_reportedSamples = 0;
    Clock::time_point m_start, m_intervalStart;
    std::unique_ptr<StepTimer> m_timer; // the step-time breakdown's marks
    std::optional<EnergyMeter> m_energy;
    std::optional<MachineLoad> m_load; // the rest of the machine (none for data-parallel lanes)
    MetricSample m_explain;            // flops, peak and energy source, sent with the first "running"
    bool m_explainSent = false;
    bool m_slowData = false;             // fault=slow-data: extra input work in each step from fault.step
    double m_paused = 0;                 // seconds spent paused, excluded from the lane clock
    bool m_flushDenormals = false;       // CPU lane thread: denormal floats flushed to zero
    bool m_cachingHostAllocator = false; // CPU lane: large blocks recycled (host_allocator.h)
    std::optional<double> m_firstLoss;   // first finite training loss (divergence reference)
    // Data-parallel lanes: this process is one rank; every rank follows one schedule.
    std::unique_ptr<DistGroup> m_dist;
    DistGroup::Agreement m_agreed; // what the ranks agreed at the end of the last step
    bool isReporter() const { return !m_dist || m_dist->rank() == 0; }
};

} // namespace devicerace::detail
