// The lane thread's training job: set-up (model, data, optimizer, device) and the loop.
#include "train/trainer.h"

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
        if (!std::getenv("DEVICERACE_KEEP_DENORMALS")) {
            m_flushDenormals = at::globalContext().setFlushDenormal(true);
        }
        m_cachingHostAllocator = useCachingHostAllocator();
    }
    // The autocast weight cache is process-global; lanes must not share it.
    at::autocast::set_autocast_cache_enabled(false);

    m_workload = &workloadImpl(m_ctx.settings.workload);
    at::Generator initGen = at::detail::createCPUGenerator(m_ctx.settings.seed);
    m_gen = initGen;
    if (cuda) {
        m_gen = at::cuda::detail::createCUDAGenerator(m_dev.index());
        m_gen.set_current_seed(m_ctx.settings.seed);
    }
    ModelOptions modelOptions;
    modelOptions.fusedLstm = m_ctx.fusedLstm;
    modelOptions.vocabulary = m_ctx.settings.data->vocabulary;
    m_model = m_workload->makeModel(initGen, modelOptions);
    m_model->to(m_dev);
    if (m_ctx.channelsLast) {
        // Before the optimizer is built, so its state follows the same layout.
        torch::NoGradGuard noGrad;
        for (auto& p : m_model->parameters()) {
            if (p.dim() == 4) {
                p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
            }
        }
    }
    m_model->gen = m_gen;
    m_data = loadLaneData(*m_ctx.settings.data, m_dev, m_gen, m_ctx.batch, m_ctx.dataOnHost);
    // Epoch orders come from a host generator seeded like the lane's own, so every lane with
    // one seed sees the batches in the same order, wherever its data lives.
    m_hostGen = at::detail::createCPUGenerator(m_ctx.settings.seed);
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
    m_optimizer = makeLaneOptimizer(m_workload->optimizer, m_model->parameters(), opt, m_ctx.fusedOptimizer);
    if (m_ctx.cudaGraph && !m_optimizer->captureSafe()) {
        throw UsageError(fmt::format("lane {}: graph=true needs fused=true ({} reads its step count on the host)",
                                     m_ctx.spec.name, m_optimizer->describe()));
    }
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

LaneOutcome Trainer::loop() {
    const std::int64_t n = m_data.trainCount;
    const std::int64_t pool = m_data.trainX.size(0); // < n for pooled synthetic data
    const std::int64_t b = m_ctx.batch;
    m_start = Clock::now();
    m_intervalStart = m_start;
    emitState(LaneState::Running, {});
    std::int64_t lastEvalStep = -1;
    torch::Tensor perm;
    std::int64_t pos = n; // position in the current epoch's permutation
    // A captured step has one batch shape: graph lanes drop an epoch's last partial batch.
    const auto epochDone = [&] { return pos >= n || (m_ctx.cudaGraph && n - pos < b); };
    const bool scheduled = m_ctx.schedule != "constant";
    while (m_step < m_ctx.totalSteps) {
        if (m_ctx.stopRequested.load(std::memory_order_relaxed)) {
            if (auto d = report()) {
                return *d;
            }
            return {LaneState::Stopped, fmt::format("stopped at step {}", m_step)};
        }
        if (m_ctx.pauseRequested.load(std::memory_order_relaxed)) {
            if (auto d = report()) {
                return *d;
            }
            emitState(LaneState::Paused, {});
            m_paused += m_ctx.waitWhilePaused();
            m_intervalStart = Clock::now();
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
        const std::int64_t take = std::min(b, n - pos);
        auto idx = perm.narrow(0, pos, take);
        if (pool < n) {
            idx = idx.remainder(pool);
        }
        if (scheduled) {
            m_optimizer->setLr(m_ctx.lr * scheduleFactor(m_ctx.schedule, m_step, m_ctx.totalSteps));
        }
        trainStep(idx);
        pos += take;
        ++m_step;
        m_samples += take;

        const bool epochEnd = epochDone();
        const bool last = m_step == m_ctx.totalSteps;
        const bool evalDue = epochEnd || (m_ctx.settings.evalEverySteps > 0 &&
                                          m_step % m_ctx.settings.evalEverySteps == 0);
        if (epochEnd) {
            ++m_epochsDone;
        }
        if (m_inBuf == kStepBuffer || m_step == m_ctx.settings.warmupSteps || evalDue || last ||
            seconds(Clock::now() - m_intervalStart) >= m_ctx.settings.reportIntervalSeconds) {
            if (auto d = report()) {
                return *d;
            }
        }
        if (evalDue || (last && lastEvalStep != m_step)) {
            evaluate();
            lastEvalStep = m_step;
        }
    }
    return {LaneState::Finished, {}};
}

LaneOutcome runTraining(LaneContext& ctx) {
    Trainer trainer(ctx);
    return trainer.run();
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
