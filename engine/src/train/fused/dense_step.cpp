// The fused dense step (see dense_step.h).
#include "train/fused/dense_step.h"
#include "train/fused/each_worker.h"
#include "train/step_timer.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>

#include "devicerace/environment.h"
#include "devicerace/errors.h"
#include "kernels/cpu_kernels.h"
#include "kernels/mkl_gemm.h"
#include "train/lane_optimizer.h"

namespace devicerace::detail {

namespace {

cpu::Bf16* bf16Ptr(const at::Tensor& t) { return reinterpret_cast<cpu::Bf16*>(t.data_ptr<at::BFloat16>()); }
cpu::Bf16InF32* inF32Ptr(const at::Tensor& t) { return reinterpret_cast<cpu::Bf16InF32*>(t.data_ptr<float>()); }
float* f32Ptr(const at::Tensor& t) { return t.data_ptr<float>(); }

} // namespace

std::optional<std::string> DenseStep::whyNot(Net& net, Task task, const c10::Device& dev, Precision precision,
                                             bool distributed, bool fused) {
    if (auto why = FusedStep::whyNotAny(dev, precision, distributed, fused)) {
        return why;
    }
    if (task != Task::Classify) {
        return "not a softmax classifier";
    }
    const auto layers = net.denseStack();
    if (layers.empty()) {
        return "not a stack of dense layers";
    }
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const auto& l = layers[i];
        if (i + 1 < layers.size() && !l.relu) {
            return "a hidden layer without a ReLU";
        }
        if (i + 1 == layers.size() && (l.relu || l.dropout > 0)) {
            return "an activation on the logits";
        }
        if (l.weight.scalar_type() != at::kFloat || !l.bias.defined() ||
            (i > 0 && l.weight.size(1) != layers[i - 1].weight.size(0))) {
            return "layer shapes it does not handle";
        }
    }
    return std::nullopt;
}

DenseStep::DenseStep(Net& net, std::int64_t maxBatch, bool bf16, const DeviceData& data,
                     const std::vector<std::int64_t>& inputShape)
    : m_bf16(bf16), m_dropoutOff(dropoutOffForTests()), m_data(data), m_inputShape(inputShape) {
    // DEVICERACE_DENSE_SPLIT=0 (benchmarks): the whole batch in each op, its GEMMs on MKL's threads.
    const char* split = devicerace::environmentSwitch("DEVICERACE_DENSE_SPLIT");
    m_split = !(split && std::string_view(split) == "0");
    // DEVICERACE_DENSE_BALANCE=0 (benchmarks): even shares; a fraction in (0, 1) (tests): worker
    // 0's fixed share of the rows and of the units, the rest even.
    if (const char* balance = devicerace::environmentSwitch("DEVICERACE_DENSE_BALANCE")) {
        char* end = nullptr;
        const double v = std::strtod(balance, &end);
        if (end != balance && *end == '\0' && v >= 0 && v < 1) {
            m_balance = false;
            m_fixedShare = v;
        }
    }
    torch::NoGradGuard noGrad;
    const auto views = net.denseStack();
    std::int64_t total = 0;
    for (const auto& v : views) {
        total += v.weight.numel() + v.bias.numel();
    }
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    const auto actType = at::TensorOptions().dtype(bf16 ? at::kBFloat16 : at::kFloat);
    m_flat = FlatParams(total, bf16);
    std::int64_t offset = 0;
    for (const auto& v : views) {
        Layer l;
        l.out = v.weight.size(0);
        l.in = v.weight.size(1);
        l.relu = v.relu;
        l.dropout = static_cast<float>(v.dropout);
        l.offset = offset;
        // The module's parameters become views of the flat buffer; the weights get a bf16 mirror.
        auto weight = m_flat.adopt(v.weight, offset, true);
        auto bias = m_flat.adopt(v.bias, offset, false);
        l.w = weight.w;
        l.gw = weight.g;
        l.wb = weight.wb;
        l.b = bias.w;
        l.gb = bias.g;
        l.act = at::empty({maxBatch, l.out}, actType);
        l.grad = at::empty({maxBatch, l.out}, actType);
        m_layers.push_back(std::move(l));
    }
    m_input = at::empty({maxBatch, m_layers.front().in}, actType);
    m_flat.syncMirror();
    if (bf16) {
        for (const auto& l : m_layers) {
            m_sumsLd = std::max({m_sumsLd, l.in, l.out});
        }
        m_sums = at::empty({maxBatch, m_sumsLd}, f32);
        chooseRoutes(maxBatch);
        if (m_inF32) {
            for (auto& l : m_layers) {
                l.act = at::empty({maxBatch, l.out}, f32);
                l.grad = at::empty({maxBatch, l.out}, f32);
                l.wWide = at::empty({l.out, l.in}, f32);
            }
            m_input = at::empty({maxBatch, m_layers.front().in}, f32);
        }
    }
    // Bytes straight to the network's input in one pass, when no per-channel step is needed.
    const bool oneChannel = !data.mean.defined() || data.mean.numel() == 1;
    m_byteInput = data.trainX.scalar_type() == at::kByte && oneChannel &&
                  data.trainX.numel() / std::max<std::int64_t>(1, data.trainX.size(0)) == m_layers.front().in;
    if (m_byteInput) {
        const float mean = data.mean.defined() ? data.mean.item<float>() : 0.0f;
        const float stddev = data.stddev.defined() ? data.stddev.item<float>() : 1.0f;
        m_scale = 1.0f / (255.0f * stddev);
        m_shift = -mean / stddev;
    }
}

at::Tensor DenseStep::input(const at::Tensor& x) {
    const auto rows = x.size(0);
    auto in = m_input.narrow(0, 0, rows);
    const auto prepared = prepareInput(x, m_data, m_inputShape, false).reshape({rows, -1});
    if (prepared.size(1) != in.size(1)) {
        throw Error(
            fmt::format("the batch has {} values per example; the network takes {}", prepared.size(1), in.size(1)));
    }
    if (m_inF32) {
        const auto values = prepared.to(at::kFloat).contiguous();
        cpu::roundToBf16(values.data_ptr<float>(), inF32Ptr(in), values.numel());
        return in;
    }
    in.copy_(prepared);
    return in;
}

namespace {

using Clock = std::chrono::steady_clock;

// Rows per worker below which splitting a batch costs more than it saves (a GEMM of fewer
// rows runs far below the core's peak).
constexpr std::int64_t kMinRowsPerWorker = 16;
// Rows are shared in blocks of this many, and each block's bias-gradient and loss partial sums
// are kept apart and added in block order: the sums do not depend on how the blocks were
// shared (1 or 2 threads, even or balanced shares).
constexpr std::int64_t kBlockRows = 4;
// Units are shared in multiples of this many (the M of a weight-gradient GEMM), at least this
// many a worker; a layer with fewer than twice as many goes whole to the last worker. MKL gives
// the same bits for a row of a product whatever the rows around it at these sizes, but not to a
// product of 2 rows (a 10-unit layer split 8 + 2 changed fashion-mlp's course): so the bits
// of a step do not depend on the shares, and 1 and 2 threads agree where MKL does.
constexpr std::int64_t kUnitGranule = 16;

double secondsSince(Clock::time_point t0, Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); }

// Calls f(block, first row, rows) for each block of rows [r0, r1) (r0 a multiple of kBlockRows).
template <class F>
void eachBlock(std::int64_t r0, std::int64_t r1, const F& f) {
    for (auto r = r0; r < r1; r += kBlockRows) {
        f(r / kBlockRows, r, std::min(kBlockRows, r1 - r));
    }
}

} // namespace

struct DenseStep::StepState {
    std::int64_t rows = 0, workers = 1, blocks = 0;
    std::vector<std::int64_t> rowBounds;               // worker w's rows: [rowBounds[w], rowBounds[w + 1])
    std::vector<std::vector<std::int64_t>> unitBounds; // per layer, the same over its output units
    Clock::time_point regionStart;
    std::vector<double> finished;        // per worker: seconds from the region's start to its share's end
    std::vector<double> shares;          // per worker: its fraction of the region's work
    const std::uint8_t* bytes = nullptr; // the batch as stored, when the step converts it
    const std::int64_t* labels = nullptr;
    std::vector<std::uint64_t> seeds;      // per layer
    std::vector<float> drop;               // per layer: its dropout probability this step (0: none)
    std::vector<cpu::CrossEntropy> losses; // per block of rows
    LaneOptimizer* optimizer = nullptr;    // set when each worker steps its own slices
    // Worker 0's (the lane thread's) phase ends, for the step breakdown.
    Clock::time_point dataEnd, forwardEnd;
    bool timed = false;       // this step's phases are timed
    ThreadTime dataEndThread; // the lane thread's CPU time and switches at dataEnd
    double optimizerSeconds = 0;
    // The weights' bf16 mirror widened at the step's start (bf16 values in fp32 storage): the
    // optimizer's work, though it runs before the forward (the timer's marks move by it).
    Clock::duration mirror{};
};

DenseStep::~DenseStep() = default;

void DenseStep::chooseRoutes(std::int64_t maxBatch) {
    const auto threads = std::max(1, at::get_num_threads());
    const auto workers = m_split ? std::clamp<std::int64_t>(maxBatch / kMinRowsPerWorker, 1, threads) : 1;
    const auto share = [&](std::int64_t n) { return (n + workers - 1) / workers; };
    // Without bf16 units too: MKL's bf16 GEMM and fp32 on the bf16 values are timed (the lane
    // also says "bf16 emulated"); oneDNN's emulation is no candidate there (timedBf16Routes).
    // There the fp32 route is timed on fp32 operands, as the step then keeps them (below), and
    // another route must beat it by the bf16 copies' margin.
    const char* inF32 = devicerace::environmentSwitch("DEVICERACE_BF16_IN_F32");
    const bool inF32Allowed = !(inF32 && std::string_view(inF32) == "0");
    cpu::Bf16Router router(threads, static_cast<int>(workers), cpu::Bf16Router::Timer{}, cpu::TrialCaches::Warm,
                           inF32Allowed ? cpu::GemmInputs::Fp32WhereAllFp32 : cpu::GemmInputs::Bf16Copies);
    const auto rows = share(maxBatch);
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
        auto& l = m_layers[i];
        l.forward = router.route({rows, l.out, l.in, false, true});
        if (i > 0) {
            l.inputGrad = router.route({rows, l.in, l.out, false, false});
        }
        l.weightGrad = router.route({share(l.out), l.in, maxBatch, true, false});
    }
    m_routes = router.summary();
    // Every GEMM of a layer does batch x in x out multiply-adds: the arithmetic on routes other
    // than fp32, as a share. Under 2%, fp32 for those shapes too costs less than the bf16 copies
    // the fp32 route widens at every GEMM (timed with its widening, the fp32 route already
    // wins the rest).
    double all = 0, other = 0;
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
        const auto& l = m_layers[i];
        const auto size = static_cast<double>(l.in * l.out);
        for (const auto* r : {&l.forward, &l.inputGrad, &l.weightGrad}) {
            if (r == &l.inputGrad && i == 0) {
                continue; // the input's gradient is not computed
            }
            all += size;
            other += *r == cpu::Bf16Route::Fp32 ? 0.0 : size;
        }
    }
    if (other > 0.02 * all || !inF32Allowed) {
        return;
    }
    m_inF32 = true;
    for (auto& l : m_layers) {
        l.forward = l.inputGrad = l.weightGrad = cpu::Bf16Route::Fp32;
    }
    m_routes = other > 0
                   ? fmt::format("fp32 for every GEMM, on bf16 values kept in fp32 storage (timed: {}, the "
                                 "other routes' shapes {:.1f}% of the arithmetic)",
                                 m_routes, 100 * other / all)
                   : fmt::format("fp32 for every GEMM, on bf16 values kept in fp32 storage (timed: {})", m_routes);
}

void DenseStep::fixShares(ShareBalancer& shares, std::int64_t workers) const {
    const auto n = static_cast<std::size_t>(workers);
    if (m_balance || workers < 2 || shares.fractions().size() == n) {
        return; // (fixed shares are set once for a count of workers)
    }
    std::vector<double> fractions(n, 1.0 / static_cast<double>(n));
    if (m_fixedShare > 0) {
        fractions.assign(n, (1.0 - m_fixedShare) / static_cast<double>(n - 1));
        fractions[0] = m_fixedShare;
    }
    shares.set(fractions);
}

template <class ShareOf>
void DenseStep::learnShares(ShareBalancer& shares, StepState& s, const ShareOf& shareOf) const {
    if (!m_balance || s.workers < 2) {
        return;
    }
    s.shares.resize(static_cast<std::size_t>(s.workers));
    for (std::int64_t w = 0; w < s.workers; ++w) {
        s.shares[static_cast<std::size_t>(w)] = shareOf(w);
    }
    shares.learn(s.shares, s.finished);
}

void DenseStep::rowsPass(StepState& s, std::int64_t worker) {
    const auto r0 = s.rowBounds[static_cast<std::size_t>(worker)];
    const auto r1 = s.rowBounds[static_cast<std::size_t>(worker) + 1];
    const auto n = r1 - r0;
    auto prev = m_input.narrow(0, r0, n);
    if (s.bytes) {
        const auto in = m_layers.front().in;
        if (m_inF32) {
            cpu::bytesToBf16(s.bytes + r0 * in, inF32Ptr(prev), n * in, m_scale, m_shift);
        } else if (m_bf16) {
            cpu::bytesToBf16(s.bytes + r0 * in, bf16Ptr(prev), n * in, m_scale, m_shift);
        } else {
            cpu::bytesToFloat(s.bytes + r0 * in, prev.data_ptr<float>(), n * in, m_scale, m_shift);
        }
    }
    if (worker == 0) {
        s.dataEnd = Clock::now();
        if (s.timed) {
            s.dataEndThread = ThreadTime::now();
        }
    }
    // Forward: act_l = dropout(relu(act_{l-1} W_l^T + b_l)).
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
        auto& l = m_layers[i];
        auto out = l.act.narrow(0, r0, n);
        if (m_inF32) {
            float* sums = m_sums.data_ptr<float>() + r0 * m_sumsLd;
            cpu::gemmF32({n, l.out, l.in, false, true}, f32Ptr(prev), l.in, f32Ptr(l.wWide), l.in, sums, m_sumsLd);
            cpu::biasReluDropout(sums, m_sumsLd, inF32Ptr(out), l.b.data_ptr<float>(), n, l.out, l.relu, s.drop[i],
                                 s.seeds[i], r0);
        } else if (m_bf16) {
            float* sums = m_sums.data_ptr<float>() + r0 * m_sumsLd;
            cpu::gemmBf16Routed(l.forward, {n, l.out, l.in, false, true}, bf16Ptr(prev), l.in, bf16Ptr(l.wb), l.in,
                                sums, m_sumsLd);
            cpu::biasReluDropout(sums, m_sumsLd, bf16Ptr(out), l.b.data_ptr<float>(), n, l.out, l.relu, s.drop[i],
                                 s.seeds[i], r0);
        } else {
            at::mm_out(out, prev, l.w.t());
            cpu::biasReluDropout(out.data_ptr<float>(), l.b.data_ptr<float>(), n, l.out, l.relu, s.drop[i], s.seeds[i],
                                 r0);
        }
        prev = out;
    }
    // Loss and its gradient (of the whole batch's mean).
    auto& last = m_layers.back();
    eachBlock(r0, r1, [&](std::int64_t block, std::int64_t r, std::int64_t rows) {
        float* parts = last.biasParts.data() + block * last.out;
        auto& part = s.losses[static_cast<std::size_t>(block)];
        const auto offset = r * last.out;
        if (m_inF32) {
            part = cpu::softmaxCrossEntropy(inF32Ptr(last.act) + offset, s.labels + r, rows, last.out,
                                            inF32Ptr(last.grad) + offset, parts, s.rows);
        } else {
            part = m_bf16 ? cpu::softmaxCrossEntropy(bf16Ptr(last.act) + offset, s.labels + r, rows, last.out,
                                                     bf16Ptr(last.grad) + offset, parts, s.rows)
                          : cpu::softmaxCrossEntropy(last.act.data_ptr<float>() + offset, s.labels + r, rows, last.out,
                                                     last.grad.data_ptr<float>() + offset, parts, s.rows);
        }
    });
    if (worker == 0) {
        s.forwardEnd = Clock::now();
    }
    // The input-gradient chain: d_{l-1} = relu/dropout'(d_l W_l).
    for (std::size_t i = m_layers.size() - 1; i > 0; --i) {
        auto& l = m_layers[i];
        auto& lower = m_layers[i - 1];
        const auto d = l.grad.narrow(0, r0, n);
        auto dBelow = lower.grad.narrow(0, r0, n);
        const float scale = s.drop[i - 1] > 0 ? 1.0f / (1.0f - s.drop[i - 1]) : 1.0f;
        const auto o = lower.out;
        if (m_inF32) {
            float* sums = m_sums.data_ptr<float>();
            cpu::gemmF32({n, l.in, l.out, false, false}, f32Ptr(d), l.out, f32Ptr(l.wWide), l.in, sums + r0 * m_sumsLd,
                         m_sumsLd);
            eachBlock(r0, r1, [&](std::int64_t block, std::int64_t r, std::int64_t rows) {
                cpu::reluDropoutBackward(sums + r * m_sumsLd, m_sumsLd, inF32Ptr(lower.grad) + r * o,
                                         inF32Ptr(lower.act) + r * o, rows, o, scale,
                                         lower.biasParts.data() + block * o);
            });
            continue;
        }
        if (m_bf16) {
            float* sums = m_sums.data_ptr<float>();
            cpu::gemmBf16Routed(l.inputGrad, {n, l.in, l.out, false, false}, bf16Ptr(d), l.out, bf16Ptr(l.wb), l.in,
                                sums + r0 * m_sumsLd, m_sumsLd);
            eachBlock(r0, r1, [&](std::int64_t block, std::int64_t r, std::int64_t rows) {
                cpu::reluDropoutBackward(sums + r * m_sumsLd, m_sumsLd, bf16Ptr(lower.grad) + r * o,
                                         bf16Ptr(lower.act) + r * o, rows, o, scale,
                                         lower.biasParts.data() + block * o);
            });
            continue;
        }
        at::mm_out(dBelow, d, l.w);
        eachBlock(r0, r1, [&](std::int64_t block, std::int64_t r, std::int64_t rows) {
            cpu::reluDropoutBackward(lower.grad.data_ptr<float>() + r * o, lower.act.data_ptr<float>() + r * o, rows, o,
                                     scale, lower.biasParts.data() + block * o);
        });
    }
    s.finished[static_cast<std::size_t>(worker)] = secondsSince(s.regionStart, Clock::now());
}

void DenseStep::unitsPass(StepState& s, std::int64_t worker) {
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
        auto& l = m_layers[i];
        const auto& bounds = s.unitBounds[i];
        const auto o0 = bounds[static_cast<std::size_t>(worker)];
        const auto units = bounds[static_cast<std::size_t>(worker) + 1] - o0;
        if (units == 0) {
            continue;
        }
        // dW = d^T act_{l-1}, these units' rows of it, over the whole batch.
        const auto below = i > 0 ? m_layers[i - 1].act.narrow(0, 0, s.rows) : m_input.narrow(0, 0, s.rows);
        const auto weights = l.offset + o0 * l.in;
        if (m_inF32) {
            cpu::gemmF32({units, l.in, s.rows, true, false}, f32Ptr(l.grad) + o0, l.out, f32Ptr(below), l.in,
                         l.gw.data_ptr<float>() + o0 * l.in, l.in);
        } else if (m_bf16) {
            cpu::gemmBf16Routed(l.weightGrad, {units, l.in, s.rows, true, false}, bf16Ptr(l.grad) + o0, l.out,
                                bf16Ptr(below), l.in, l.gw.data_ptr<float>() + o0 * l.in, l.in);
        } else {
            const auto d = l.grad.narrow(0, 0, s.rows).narrow(1, o0, units);
            auto gw = l.gw.narrow(0, o0, units);
            at::mm_out(gw, d.t(), below);
        }
        // The bias gradient: the blocks' partial sums, added in block order.
        float* gb = l.gb.data_ptr<float>() + o0;
        std::copy_n(l.biasParts.data() + o0, units, gb);
        for (std::int64_t k = 1; k < s.blocks; ++k) {
            const float* part = l.biasParts.data() + k * l.out + o0;
            for (std::int64_t c = 0; c < units; ++c) {
                gb[c] += part[c];
            }
        }
        if (s.optimizer) {
            const auto start = worker == 0 ? Clock::now() : Clock::time_point{};
            s.optimizer->stepRange(weights, weights + units * l.in);
            const auto bias = l.offset + l.out * l.in + o0;
            s.optimizer->stepRange(bias, bias + units);
            if (worker == 0) {
                s.optimizerSeconds += std::chrono::duration<double>(Clock::now() - start).count();
            }
        }
    }
    s.finished[static_cast<std::size_t>(worker)] = secondsSince(s.regionStart, Clock::now());
}

void DenseStep::step(const at::Tensor& x, const at::Tensor& y, at::Generator& gen, LaneOptimizer& optimizer,
                     at::Tensor& loss, at::Tensor& correct, StepTimer* timer) {
    if (!m_step) {
        m_step = std::make_unique<StepState>();
    }
    auto& s = *m_step;
    s.drop.clear();
    s.seeds.clear();
    s.optimizerSeconds = 0;
    s.timed = timer && timer->active();
    s.dataEndThread = {};
    s.rows = x.size(0);
    s.workers =
        m_split ? std::clamp<std::int64_t>(s.rows / kMinRowsPerWorker, 1, std::max(1, at::get_num_threads())) : 1;
    at::Tensor bytes;
    if (m_byteInput) {
        bytes = x.contiguous();
        s.bytes = bytes.data_ptr<std::uint8_t>();
    } else {
        input(x);
    }
    const auto labels = y.contiguous();
    s.labels = labels.data_ptr<std::int64_t>();
    s.mirror = {};
    if (m_inF32) {
        // the weights' bf16 mirror (as the optimizer left it) widened once for the step's GEMMs
        const auto start = Clock::now();
        for (auto& l : m_layers) {
            cpu::toFloat(bf16Ptr(l.wb), f32Ptr(l.wWide), l.wb.numel());
        }
        s.mirror = Clock::now() - start;
    }
    // One seed per dropout layer in forward order, as laneDropout draws them.
    s.blocks = (s.rows + kBlockRows - 1) / kBlockRows;
    for (auto& l : m_layers) {
        s.drop.push_back(m_dropoutOff ? 0.0f : l.dropout);
        s.seeds.push_back(s.drop.back() > 0 ? dropoutSeed(gen) : 0);
        l.biasParts.resize(static_cast<std::size_t>(s.blocks * l.out));
    }
    s.losses.assign(static_cast<std::size_t>(s.blocks), cpu::CrossEntropy{});
    s.finished.assign(static_cast<std::size_t>(s.workers), 0.0);
    fixShares(m_rowShares, s.workers);
    m_rowShares.split(s.rows, s.workers, kBlockRows, kMinRowsPerWorker, s.rowBounds);
    s.regionStart = Clock::now();
    eachWorker(s.workers, [&](std::int64_t w) { rowsPass(s, w); });
    learnShares(m_rowShares, s, [&](std::int64_t w) {
        const auto i = static_cast<std::size_t>(w);
        return static_cast<double>(s.rowBounds[i + 1] - s.rowBounds[i]) / static_cast<double>(s.rows);
    });
    cpu::CrossEntropy ce;
    for (const auto& part : s.losses) {
        ce.lossSum += part.lossSum;
        ce.correct += part.correct;
        ce.badLabel = ce.badLabel || part.badLabel;
    }
    if (ce.badLabel) {
        throw Error(fmt::format("a label outside the network's {} classes", m_layers.back().out));
    }
    loss.fill_(ce.lossSum / static_cast<double>(s.rows));
    correct.fill_(ce.correct);
    if (timer) {
        // bytes to normalised floats: input work. The marks move back by the mirror's widening,
        // which the optimizer's phase takes at the step's end.
        timer->markAt(Phase::Data, s.dataEnd - s.mirror, &s.dataEndThread);
        timer->markAt(Phase::Forward, s.forwardEnd - s.mirror);
    }
    s.optimizer = s.workers > 1 && optimizer.steppedInRanges() ? &optimizer : nullptr;
    fixShares(m_unitShares, s.workers);
    s.unitBounds.resize(m_layers.size());
    double work = 0; // every layer's weight-gradient GEMM, in multiply-adds per row
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
        auto& bounds = s.unitBounds[i];
        if (m_layers[i].out < 2 * kUnitGranule) {
            bounds.assign(static_cast<std::size_t>(s.workers), 0);
            bounds.push_back(m_layers[i].out);
        } else {
            m_unitShares.split(m_layers[i].out, s.workers, kUnitGranule, kUnitGranule, bounds);
        }
        work += static_cast<double>(m_layers[i].out * m_layers[i].in);
    }
    s.finished.assign(static_cast<std::size_t>(s.workers), 0.0);
    s.regionStart = Clock::now();
    eachWorker(s.workers, [&](std::int64_t w) { unitsPass(s, w); });
    learnShares(m_unitShares, s, [&](std::int64_t w) {
        const auto i = static_cast<std::size_t>(w);
        double done = 0;
        for (std::size_t k = 0; k < m_layers.size(); ++k) {
            done += static_cast<double>((s.unitBounds[k][i + 1] - s.unitBounds[k][i]) * m_layers[k].in);
        }
        return done / work;
    });
    if (timer) {
        // The lane thread's optimizer slices, timed inside the region, are the optimizer phase.
        timer->markAt(Phase::Backward, Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(s.optimizerSeconds)));
    }
    if (!s.optimizer) {
        optimizer.step();
    }
    if (timer) {
        timer->mark(Phase::Optimizer);
    }
}

std::string DenseStep::describe() const {
    return m_bf16 ? fmt::format("fused dense step (bf16 GEMMs with fp32 sums: {}; fp32 master weights)", m_routes)
                  : "fused dense step";
}

std::vector<double> DenseStep::threadSpeeds() const {
    const auto& rows = m_rowShares.fractions();
    const auto& units = m_unitShares.fractions();
    if (!m_balance || rows.size() < 2 || units.size() != rows.size()) {
        return {};
    }
    // At the balancers' fixed point each thread's share is in proportion to its speed.
    std::vector<double> speeds(rows.size());
    for (std::size_t w = 0; w < rows.size(); ++w) {
        speeds[w] = (rows[w] + units[w]) / 2;
    }
    const double fastest = *std::max_element(speeds.begin(), speeds.end());
    for (auto& v : speeds) {
        v /= fastest;
    }
    return speeds;
}

std::string DenseStep::describeThreads() const {
    const int threads = at::get_num_threads();
    return threads > 1 && m_split
               ? fmt::format("each step's batch rows, then its units, split over {} threads{}", threads,
                             m_balance ? " in shares that follow each thread's measured speed" : "")
               : "";
}

} // namespace devicerace::detail
