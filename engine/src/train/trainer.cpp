// The lane thread's training job: set-up (model, data, optimizer, device) and the loop.
#include "train/trainer.h"
#include "train/fused/dense_step.h"
#include "train/fused/gpt_step.h"

#include "kernels/cpu_kernels.h"
#include "kernels/fast_paths.h"
#include "kernels/host_allocator.h"
#include <ATen/cuda/CUDAContext.h>
#include <cctype>

#include "devicerace/environment.h"
#include "devicerace/peak_flops.h"
#include "devices/cpu_info.h"
#include "models/flop_count.h"

namespace devicerace::detail {

namespace {

// Process-wide CUDA settings, made once when the first CUDA lane starts: cuDNN picks the
// fastest algorithm per shape, and fp32 convolutions and matrix products may use TF32 (the
// PyTorch peers in bench/ set the same).
void configureCudaOnce() {
    static std::once_flag once;
    std::call_once(once, [] {
        auto& context = at::globalContext();
        context.setBenchmarkCuDNN(true);
        context.setAllowTF32CuDNN(true);
        context.setFloat32MatmulPrecision("high");
    });
}

} // namespace

LaneOutcome Trainer::run() {
    const bool cuda = m_dev.is_cuda();
    // Per-lane CPU threads: the first call forces the lazy per-thread init that would
    // otherwise re-apply the global value later (measured, see LIBTORCH.md).
    (void)at::get_num_threads();
    at::set_num_threads(m_ctx.threads);
    std::optional<CpuMemoryScope> cpuMemory;
    std::optional<c10::cuda::CUDAGuard> deviceGuard;
    std::optional<c10::cuda::CUDAStreamGuard> streamGuard;
    if (cuda) {
        // CUDA's lazy initialisation (the caching allocator among it) must precede the first
        // allocator call below; C++ has no torch.cuda.init() doing it for us.
        at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
        configureCudaOnce();
        deviceGuard.emplace(m_dev);
        // One pool stream per lane, so a report-point sync waits for this lane only.
        streamGuard.emplace(c10::cuda::getStreamFromPool(false, m_dev.index()));
        c10::cuda::CUDACachingAllocator::resetPeakStats(m_dev.index());
    } else {
        cpuMemory.emplace();
        m_cpuMemory = &cpuMemory->tracker();
        if (m_ctx.fast.flushDenormals) {
            m_flushDenormals = at::globalContext().setFlushDenormal(true);
            countFastPath();
            if (m_flushDenormals) {
                // The flag is per thread: the threads of this lane's OpenMP team (ATen's, MKL's and
                // oneDNN's parallel regions, the fused dense step's workers) flush too.
                cpu::shareFpControlWithTeam(m_ctx.threads);
            }
        }
        // The guard sees every lane's large blocks; only a lane with the host-cache fast path
        // keeps its blocks for the next step (a plain lane's are malloc'ed and freed each time).
        const bool keep = m_ctx.fast.hostCache;
        cacheThisThreadsBlocks(keep);
        at::parallel_for(0, m_ctx.threads, 1, [keep](std::int64_t, std::int64_t) { cacheThisThreadsBlocks(keep); });
        m_cachingHostAllocator = m_ctx.fast.hostCache && useCachingHostAllocator();
    }
    // The autocast weight cache is process-global; lanes must not share it.
    at::autocast::set_autocast_cache_enabled(false);

    if (!m_ctx.fault.kind.empty() && m_ctx.fault.step == 0) {
        injectFault(m_ctx.fault); // fault=KIND:0: before anything (a rank that never joins)
    }
    if (m_ctx.settings.dist) {
        // The rendezvous: every rank of the lane must arrive, or this throws naming who did not.
        m_dist = std::make_unique<DistGroup>(*m_ctx.settings.dist, m_dev);
    }
    m_workload = &workloadImpl(m_ctx.settings.workload);
    at::Generator initGen = at::detail::createCPUGenerator(m_ctx.settings.seed);
    m_gen = initGen;
    if (cuda) {
        m_gen = at::cuda::detail::createCUDAGenerator(m_dev.index());
        m_gen.set_current_seed(m_ctx.settings.seed);
    }
    ModelOptions modelOptions;
    modelOptions.fusedLstm = m_ctx.fusedLstm;
    modelOptions.fast = m_ctx.fast;
    modelOptions.vocabulary = m_ctx.settings.data->vocabulary;
    m_model = m_workload->makeModel(initGen, modelOptions);
    m_model->to(m_dev);
    if (m_ctx.channelsLast) {
        // Before the optimizer is built, so its state follows the same layout.
        torch::NoGradGuard noGrad;
        for (auto& p : m_model->parameters()) {
            if (p.dim() == 4) {
                p.set_data(channelsLastStrided(p.data()).clone(at::MemoryFormat::Preserve)); // own storage
            }
        }
    }
    m_model->gen = m_gen;
    if (m_dist) {
        // Every rank starts from rank 0's weights and trains them with averaged gradients.
        auto tensors = m_model->parameters();
        for (const auto& b : m_model->buffers()) {
            tensors.push_back(b);
        }
        m_dist->broadcast(tensors);
        m_dist->attach(m_model->parameters());
    }
    m_data = loadLaneData(*m_ctx.settings.data, m_dev, m_gen, m_ctx.batch, m_ctx.dataOnHost);
    m_dataLoaded = true;
    if (m_dist) {
        // Every rank made the same synthetic data from the lane's seed; dropout draws per rank.
        m_gen.set_current_seed(m_ctx.settings.seed + static_cast<std::uint64_t>(m_dist->rank()));
    }
    // Epoch orders come from a host generator seeded like the lane's own, so every lane with
    // one seed sees the batches in the same order, wherever its data lives.
    m_hostGen = at::detail::createCPUGenerator(m_ctx.settings.seed);
    if (m_ctx.augment) {
        // Crops and flips: a host stream of their own (the same on every device), per rank.
        constexpr std::uint64_t kAugmentStream = 0x9e3779b97f4a7c15ULL;
        m_augmentGen = at::detail::createCPUGenerator(m_ctx.settings.seed ^ kAugmentStream);
        if (m_dist) {
            m_augmentGen.set_current_seed((m_ctx.settings.seed ^ kAugmentStream) +
                                          static_cast<std::uint64_t>(m_dist->rank()));
        }
    }
    if (m_data.onHost) {
        m_batcher = std::make_unique<PinnedBatcher>(m_data, m_ctx.batch);
    }
    if (m_data.onHost || m_ctx.cudaGraph) {
        // One device batch, refilled every step (a graph's inputs must stay at one address).
        auto xShape = m_data.trainX.sizes().vec();
        xShape[0] = m_ctx.batch;
        m_batchX = at::empty(xShape, m_data.trainX.options().device(m_dev).pinned_memory(false));
        m_batchY = at::empty({m_ctx.batch}, m_data.trainY.options().device(m_dev).pinned_memory(false));
    }
    OptimizerSettings opt;
    opt.lr = m_ctx.lr;
    opt.weightDecay = m_ctx.weightDecay;
    opt.momentum = m_ctx.momentum;
    setUpFusedStep(opt); // sets m_optimizer when it takes the lane
    if (!m_optimizer) {
        m_optimizer = makeLaneOptimizer(m_workload->optimizer, m_model->parameters(), opt, m_ctx.fast.optimizer);
    }
    if (m_ctx.cudaGraph && !m_optimizer->captureSafe()) {
        throw UsageError(fmt::format("lane {}: graph=true needs fused=true ({} reads its step count on the host)",
                                     m_ctx.spec.name, m_optimizer->describe()));
    }
    setUpExplanation(modelOptions); // before the execution text, which names a bf16 peak below the fp32 one
    describeExecution();

    auto bufOpts = torch::TensorOptions().device(m_dev);
    m_lossBuf = torch::zeros({kStepBuffer}, bufOpts.dtype(torch::kFloat32));
    m_correctBuf = torch::zeros({kStepBuffer}, bufOpts.dtype(torch::kLong));
    if (m_ctx.spec.precision == Precision::Fp16) {
        m_scale = torch::full({1}, 65536.0, bufOpts.dtype(torch::kFloat32));
        m_growth = torch::zeros({1}, bufOpts.dtype(torch::kInt32));
        m_foundInf = torch::zeros({1}, bufOpts.dtype(torch::kFloat32));
    }
    m_model->train();
    return loop();
}

// CPU lanes time every step (a clock read per phase); CUDA lanes every 4th (events).
constexpr std::int64_t kBreakdownEveryCuda = 4;

void Trainer::setUpExplanation(const ModelOptions& options) {
    const bool cuda = m_dev.is_cuda();
    m_timer = std::make_unique<StepTimer>(m_dev, cuda ? kBreakdownEveryCuda : 1);
    m_slowData = m_ctx.fault.kind == "slow-data";
    if (m_dist) {
        // Rank 0 reports for the lane, but its counter is its own device's (or the whole host's
        // packages, shared with the other CPU ranks): no figure rather than a wrong one.
        m_explain.energySource = "not measured for data-parallel lanes: each rank's counter would have to be "
                                 "summed without counting a shared one twice";
    } else {
        m_energy = cuda ? EnergyMeter::gpu(m_dev.index()) : EnergyMeter::cpu();
        m_explain.energySource = m_energy->source();
        m_load.emplace();
        if (m_load->cpus() > 0) {
            m_explain.machineCpus = m_load->cpus();
        }
    }
    try {
        m_explain.flopsPerSample = trainingFlopsPerExample(m_ctx.settings.workload, options);
    } catch (const std::exception&) {
        // A network the counter cannot run stays without a count (never a guess).
    }
    // A data-parallel lane's figures are the whole lane's: one device (or CPU share) per rank.
    const double ranks = m_dist ? static_cast<double>(m_dist->world()) : 1.0;
    try {
        std::optional<PeakFlops> peak;
        if (cuda) {
            peak = gpuDatasheetPeak(at::cuda::getDeviceProperties(m_dev.index())->name, m_ctx.spec.precision);
        } else {
            peak = cpuPeakFlops(m_ctx.spec.precision, m_ctx.threads);
        }
        if (peak && peak->slowerBf16FlopsPerSec > 0) {
            m_bf16SlowerNote = fmt::format(
                "bf16 slower than fp32 on this CPU (bf16 peak {:.0f} against fp32 {:.0f} GFLOP/s at {} thread{}{})",
                peak->slowerBf16FlopsPerSec / 1e9, peak->flopsPerSec / 1e9, m_ctx.threads,
                m_ctx.threads == 1 ? "" : "s",
                readHostCpu().amxNotExposed ? "; this Xeon model's AMX is not exposed here" : "");
        }
        if (peak && peak->flopsPerSec > 0) {
            m_explain.peakFlopsPerSec = peak->flopsPerSec * ranks;
            m_explain.peakSource =
                ranks > 1 ? fmt::format("{} × {} ranks", peak->source, m_dist->world()) : peak->source;
        }
    } catch (const std::exception&) {
    }
}

// The fused step for dense networks (train/fused/dense_step.h) and GPTs (train/fused/gpt_step.h) on a CPU,
// where the plan gives the lane that fast path and the network and the lane can take it.
void Trainer::setUpFusedStep(const OptimizerSettings& opt) {
    const bool bf16 = m_ctx.spec.precision == Precision::Bf16;
    const bool fusedKey = m_ctx.fast.optimizer; // the plan's reading of fused= (on with any fast path)
    if (!m_model->denseStack().empty()) {
        if (auto why = DenseStep::whyNot(*m_model, m_workload->task, m_dev, m_ctx.spec.precision, m_dist != nullptr,
                                         fusedKey)) {
            m_fusedStepOff = *why;
            return;
        }
        if (!m_ctx.fast.denseStep) {
            m_fusedStepOff = "DEVICERACE_DENSE_STEP=0"; // the step's lever alone (benchmarks)
            return;
        }
        if (m_workload->optimizer.decayMatricesOnly) {
            m_fusedStepOff = "per-tensor decay"; // its flat buffer interleaves weights and biases
            return;
        }
        m_fusedStep = std::make_unique<DenseStep>(*m_model, m_ctx.batch, bf16, m_data, m_workload->info.inputShape);
    } else if (m_model->gptView()) {
        const auto seq = m_workload->info.inputShape.at(0) - 1; // T + 1 tokens an example
        if (auto why = GptStep::whyNot(*m_model, m_workload->task, m_dev, m_ctx.spec.precision, m_dist != nullptr,
                                       fusedKey && m_ctx.fast.gptStep, m_ctx.batch, seq)) {
            m_fusedStepOff = *why;
            return;
        }
        m_fusedStep = std::make_unique<GptStep>(*m_model, m_ctx.batch, seq, bf16);
    } else {
        return;
    }
    countFastPath();
    // DEVICERACE_FUSED_EVAL=0: the module evaluates (A/B, tests of its evaluation routes).
    const char* fusedEval = environmentSwitch("DEVICERACE_FUSED_EVAL");
    m_fusedEvaluation = m_fusedStep->evaluates() && !(fusedEval && std::string_view(fusedEval) == "0");
    m_optimizer = makeFlatOptimizer(m_workload->optimizer, m_fusedStep->flat(), opt, m_fusedStep->decayedCount());
    m_fusedLoss = torch::zeros({}, torch::kFloat32);
    m_fusedCorrect = torch::zeros({}, torch::kLong);
}

LaneOutcome Trainer::loop() {
    const std::int64_t n = m_data.trainCount;
    const std::int64_t pool = m_data.trainX.size(0); // < n for pooled synthetic data
    const std::int64_t b = m_ctx.batch;
    // Data-parallel: each step takes world × batch examples of the epoch's permutation (the
    // same on every rank: one seed) and rank r trains on its r-th slice of them — disjoint
    // shards, as DistributedSampler gives; an epoch's last partial batch is split evenly.
    const std::int64_t world = m_dist ? m_dist->world() : 1;
    const std::int64_t rank = m_dist ? m_dist->rank() : 0;
    m_start = Clock::now();
    m_intervalStart = m_start;
    emitState(LaneState::Running, {});
    std::int64_t lastEvalStep = -1;
    torch::Tensor perm;
    std::int64_t pos = n; // position in the current epoch's permutation
    // A captured step has one batch shape: graph lanes drop an epoch's last partial batch.
    const auto epochDone = [&] { return pos >= n || (m_ctx.cudaGraph && n - pos < b) || n - pos < world; };
    const bool scheduled = m_ctx.schedule != "constant";
    const auto intervalDue = [&] {
        return seconds(Clock::now() - m_intervalStart) >= m_ctx.settings.reportIntervalSeconds;
    };
    while (m_step < m_ctx.totalSteps) {
        if (m_dist ? m_agreed.stop : m_ctx.stopRequested.load(std::memory_order_relaxed)) {
            if (auto d = report()) {
                return *d;
            }
            return {LaneState::Stopped, fmt::format("stopped at step {}", m_step)};
        }
        if (m_dist ? m_agreed.pause : m_ctx.pauseRequested.load(std::memory_order_relaxed)) {
            m_agreed.pause = false;
            if (auto d = report()) {
                return *d;
            }
            emitState(LaneState::Paused, {});
            m_paused += m_ctx.waitWhilePaused();
            restartInterval();
            emitState(LaneState::Running, {});
            continue;
        }
        if (epochDone()) {
            perm = torch::randperm(n, m_hostGen, torch::TensorOptions().dtype(torch::kLong));
            if (!m_data.onHost) {
                perm = perm.to(m_dev);
            }
            pos = 0;
        }
        if (m_ctx.settings.failAtStep > 0 && m_step + 1 == m_ctx.settings.failAtStep) {
            throw Error(fmt::format("injected fault at step {}", m_step + 1));
        }
        if (!m_ctx.fault.kind.empty() && m_step + 1 == m_ctx.fault.step) {
            injectFault(m_ctx.fault);
        }
        const std::int64_t take = std::min(b * world, n - pos) / world; // this rank's share
        auto idx = perm.narrow(0, pos + rank * take, take);
        if (pool < n) {
            idx = idx.remainder(pool);
        }
        if (scheduled) {
            m_optimizer->setLr(m_ctx.lr * scheduleFactor(m_ctx.schedule, m_step, m_ctx.totalSteps));
        }
        if (m_dist) {
            m_dist->beginStep(intervalDue(), m_ctx.stopRequested.load(std::memory_order_relaxed),
                              m_ctx.pauseRequested.load(std::memory_order_relaxed));
        }
        trainStep(idx);
        if (m_dist) {
            m_agreed = m_dist->agreed();
        }
        pos += std::min(b * world, n - pos);
        ++m_step;
        m_samples += take * world;
        if (m_step == 1 && (m_fusedStep || m_model->denseRoutes) && m_ctx.spec.precision == Precision::Bf16) {
            describeExecution(); // the bf16 GEMM routes, chosen in the first step
        }

        const bool epochEnd = epochDone();
        const bool last = m_step == m_ctx.totalSteps;
        const bool evalDue =
            epochEnd || (m_ctx.settings.evalEverySteps > 0 && m_step % m_ctx.settings.evalEverySteps == 0);
        if (epochEnd) {
            ++m_epochsDone;
        }
        if (m_inBuf == kStepBuffer || m_step == m_ctx.settings.warmupSteps || evalDue || last ||
            (m_dist ? m_agreed.report : intervalDue())) {
            if (auto d = report()) {
                return *d;
            }
        }
        if ((evalDue || (last && lastEvalStep != m_step)) && isReporter()) {
            evaluate(); // data-parallel: rank 0 evaluates; the others wait in their next step
            lastEvalStep = m_step;
            if (m_fusedStep && m_model->denseRoutes && !fusedEvaluation() && !m_evalRoutesDescribed) {
                m_evalRoutesDescribed = true;
                describeExecution(); // the evaluation's dense-layer routes, chosen in its first pass
            }
        }
    }
    writeWeightsDigest();
    return {LaneState::Finished, {}};
}

// Tests of data-parallel lanes: DEVICERACE_WEIGHTS_DIGEST=DIR makes each finished lane (each
// rank) write a 64-bit FNV-1a digest of its parameters' bytes to DIR/LANE-rank-R.txt.
void Trainer::writeWeightsDigest() const {
    const char* dir = devicerace::environmentSwitch("DEVICERACE_WEIGHTS_DIGEST");
    if (!dir || !*dir) {
        return;
    }
    std::uint64_t h = 1469598103934665603ull;
    for (const auto& p : m_model->parameters()) {
        auto bytes = p.detach().to(torch::kCPU).contiguous();
        const auto* data = static_cast<const unsigned char*>(bytes.data_ptr());
        for (std::size_t i = 0; i < bytes.nbytes(); ++i) {
            h = (h ^ data[i]) * 1099511628211ull;
        }
    }
    auto lane = m_ctx.spec.name.substr(0, m_ctx.spec.name.find("/rank"));
    for (auto& c : lane) {
        c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    }
    const auto path = fmt::format("{}/{}-rank-{}.txt", dir, lane, m_dist ? m_dist->rank() : 0);
    if (FILE* f = std::fopen(path.c_str(), "w")) {
        std::fprintf(f, "%016llx\n", static_cast<unsigned long long>(h));
        std::fclose(f);
    }
}

std::string Trainer::hostOutOfMemoryMessage() const {
    const auto oom = lastHostOutOfMemory();
    const std::int64_t batch = m_ctx.batch;
    // The lane needed at least what it held plus the block it asked for; memory grows with the
    // batch, so a batch that fits is at most this (an upper bound, not a promise).
    const double needed = static_cast<double>(oom.inUse + oom.requested);
    std::int64_t fit = needed > 0 ? static_cast<std::int64_t>(static_cast<double>(batch) * oom.budget / needed) : 0;
    std::int64_t pow2 = 1;
    while (pow2 * 2 <= fit) {
        pow2 *= 2;
    }
    const std::string where = m_dataLoaded ? fmt::format("at step {}", m_step + 1) : "while loading its data";
    const std::string hint =
        fit >= 1 ? fmt::format("try batch ≤ {}", pow2) : "even batch 1 needs more than this machine has free";
    const bool capped = hostMemoryLimit() > 0 && oom.budget >= hostMemoryLimit();
    return fmt::format("out of memory {} (batch {}): it needed more than {:.1f} GB, {:.1f} GB can be had{}; {}", where,
                       batch, needed / 1e9, static_cast<double>(oom.budget) / 1e9,
                       capped ? " (DEVICERACE_HOST_MEMORY_LIMIT)" : "", hint);
}

LaneOutcome runTraining(LaneContext& ctx) {
    Trainer trainer(ctx);
    try {
        return trainer.run();
    } catch (const HostOutOfMemory&) {
        throw Error(trainer.hostOutOfMemoryMessage());
    } catch (const std::exception& e) {
        // LibTorch may have rethrown it as its own error (e.g. from autograd's engine).
        if (std::string_view(e.what()).find(kHostOutOfMemoryTag) != std::string_view::npos) {
            throw Error(trainer.hostOutOfMemoryMessage());
        }
        throw;
    }
}

std::string describeException(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (const c10::OutOfMemoryError& err) {
        return fmt::format("out of memory: {} (try a smaller batch)", err.what_without_backtrace());
    } catch (const c10::Error& err) {
        std::string msg = err.what_without_backtrace();
        if (msg.find("out of memory") != std::string::npos) {
            return fmt::format("out of memory: {} (try a smaller batch)", msg);
        }
        return msg;
    } catch (const std::bad_alloc&) {
        return "out of memory (host allocation failed; try a smaller batch or fewer lanes)";
    } catch (const std::exception& err) {
        return err.what();
    } catch (...) {
        return "unknown error";
    }
}

} // namespace devicerace::detail
