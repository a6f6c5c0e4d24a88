// The fused transformer step (see gpt_step.h).
#include "train/fused/gpt_step.h"
#include "train/fused/each_worker.h"
#include "train/step_timer.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <cmath>
#include <string_view>

#include "devicerace/environment.h"
#include "devicerace/errors.h"
#include "kernels/cpu_kernels.h"
#include "kernels/attention_kernels.h"
#include "kernels/gpt_kernels.h"
#include "kernels/bf16_routes.h"
#include "train/lane_optimizer.h"

namespace devicerace::detail {

namespace {

// The attention weights the forward keeps for the backward, every block's together, at most.
constexpr std::int64_t kMaxAttentionBytes = std::int64_t{1} << 30;

float* f32(const at::Tensor& t) { return t.data_ptr<float>(); }
cpu::Bf16* bf16(const at::Tensor& t) { return reinterpret_cast<cpu::Bf16*>(t.data_ptr<at::BFloat16>()); }
cpu::Bf16InF32* inF32(const at::Tensor& t) { return reinterpret_cast<cpu::Bf16InF32*>(t.data_ptr<float>()); }

// f(out) with out the type a loop writes `t` as: bf16, bf16 values in fp32 storage (a bf16 lane
// whose GEMMs all run in fp32), or fp32.
template <class F>
void withAct(const at::Tensor& t, bool bf16InF32, const F& f) {
    if (t.scalar_type() == at::kBFloat16) {
        f(bf16(t));
    } else if (bf16InF32) {
        f(inF32(t));
    } else {
        f(f32(t));
    }
}

// The first `rows` rows of a [maxRows, cols] buffer.
at::Tensor rowsOf(const at::Tensor& t, std::int64_t rows) { return t.narrow(0, 0, rows); }
// The first n·r·c values of a flat buffer as [n, r, c].
at::Tensor mats(const at::Tensor& flat, std::int64_t n, std::int64_t r, std::int64_t c) {
    return flat.narrow(0, 0, n * r * c).view({n, r, c});
}

// A GEMM operand's transposition and leading dimension, from its 2-D view's strides.
struct Operand {
    bool trans;
    std::int64_t ld;
};
Operand operand(const at::Tensor& t) {
    if (t.stride(1) == 1) {
        return {false, t.stride(0)};
    }
    return {true, t.stride(1)};
}

} // namespace

std::optional<std::string> GptStep::whyNot(Net& net, Task task, const c10::Device& dev, Precision precision,
                                           bool distributed, bool fused, std::int64_t batch, std::int64_t seq) {
    if (auto why = FusedStep::whyNotAny(dev, precision, distributed, fused)) {
        return why;
    }
    if (task != Task::LanguageModel) {
        return "not a language model";
    }
    const auto view = net.gptView();
    if (!view) {
        return "not a GPT";
    }
    if (view->wte.scalar_type() != at::kFloat || view->blocks.empty() || view->heads <= 0 ||
        view->wte.size(1) % view->heads != 0) {
        return "a decoder shape it does not handle";
    }
    const auto bytes = static_cast<std::int64_t>(view->blocks.size()) * batch * view->heads * seq * seq * 4;
    if (bytes > kMaxAttentionBytes) {
        return fmt::format("its attention weights would take {} MB", bytes >> 20);
    }
    return std::nullopt;
}

GptStep::GptStep(Net& net, std::int64_t maxBatch, std::int64_t seq, bool bf16) : m_bf16(bf16) {
    torch::NoGradGuard noGrad;
    const int threads = at::get_num_threads();
    const char* split = environmentSwitch("DEVICERACE_GPT_SPLIT");
    if (threads > 1 && !(split && std::string_view(split) == "0")) {
        m_maxWorkers = std::min<std::int64_t>(threads, maxBatch);
    }
    if (bf16) {
        // Timed with cold caches: the step's GEMMs sit between loops that take them (warm timings
        // gave MKL weight-gradient shapes that the step ran faster on the AMX kernel: ENGINEERING.md).
        const char* inF32 = environmentSwitch("DEVICERACE_BF16_IN_F32");
        m_inF32Allowed = !(inF32 && std::string_view(inF32) == "0");
        m_router = std::make_shared<cpu::Bf16Router>(
            threads, static_cast<int>(m_maxWorkers), cpu::Bf16Router::Timer{}, cpu::TrialCaches::Cold,
            m_inF32Allowed ? cpu::GemmInputs::Fp32WhereAllFp32 : cpu::GemmInputs::Bf16Copies);
    }
    const auto view = *net.gptView();
    m_dropout = dropoutOffForTests() ? 0.0f : static_cast<float>(view.dropout);
    m_maxBatch = maxBatch;
    m_seq = seq;
    m_heads = view.heads;
    m_width = view.wte.size(1);
    m_vocabulary = view.wte.size(0);
    // The flat order: every matrix and embedding (weight decay), then biases and LayerNorm gains.
    std::vector<at::Tensor> decayed{view.wte, view.wpe}, kept;
    for (const auto& b : view.blocks) {
        decayed.insert(decayed.end(), {b.attnWeight, b.projWeight, b.fcWeight, b.mlpWeight});
        kept.insert(kept.end(),
                    {b.ln1Weight, b.ln1Bias, b.attnBias, b.projBias, b.ln2Weight, b.ln2Bias, b.fcBias, b.mlpBias});
    }
    kept.insert(kept.end(), {view.lnFWeight, view.lnFBias});
    std::int64_t total = 0;
    for (const auto* list : {&decayed, &kept}) {
        for (const auto& t : *list) {
            total += t.numel();
            m_decayed += list == &decayed ? t.numel() : 0;
        }
    }
    m_flat = FlatParams(total, bf16);
    std::int64_t offset = 0;
    // The module's parameters become views of the flat buffer; the matrices get a bf16 mirror.
    auto take = [&](const at::Tensor& moduleParam, bool matrix) { return m_flat.adopt(moduleParam, offset, matrix); };
    m_wte = take(view.wte, true);
    m_wpe = take(view.wpe, true);
    m_blocks.resize(view.blocks.size());
    for (std::size_t i = 0; i < view.blocks.size(); ++i) {
        auto& k = m_blocks[i];
        const auto& v = view.blocks[i];
        k.attnW = take(v.attnWeight, true);
        k.projW = take(v.projWeight, true);
        k.fcW = take(v.fcWeight, true);
        k.mlpW = take(v.mlpWeight, true);
    }
    for (std::size_t i = 0; i < view.blocks.size(); ++i) {
        auto& k = m_blocks[i];
        const auto& v = view.blocks[i];
        k.ln1w = take(v.ln1Weight, false);
        k.ln1b = take(v.ln1Bias, false);
        k.attnB = take(v.attnBias, false);
        k.projB = take(v.projBias, false);
        k.ln2w = take(v.ln2Weight, false);
        k.ln2b = take(v.ln2Bias, false);
        k.fcB = take(v.fcBias, false);
        k.mlpB = take(v.mlpBias, false);
    }
    m_lnFw = take(view.lnFWeight, false);
    m_lnFb = take(view.lnFBias, false);
    m_flat.syncMirror();
    // Each worker's part is at most this many sequences (workersFor, step).
    const auto share = (maxBatch + m_maxWorkers - 1) / m_maxWorkers;
    allocate(share);
    for (std::int64_t w = 1; w < m_maxWorkers; ++w) {
        m_workers.push_back(std::unique_ptr<GptStep>(new GptStep(*this, share)));
    }
}

GptStep::GptStep(GptStep& primary, std::int64_t sequences)
    : m_bf16(primary.m_bf16), m_inF32Allowed(primary.m_inF32Allowed), m_router(primary.m_router),
      m_dropout(primary.m_dropout), m_maxBatch(sequences), m_seq(primary.m_seq), m_heads(primary.m_heads),
      m_width(primary.m_width), m_vocabulary(primary.m_vocabulary), m_decayed(primary.m_decayed) {
    torch::NoGradGuard noGrad;
    m_flat.params = primary.m_flat.params;
    m_flat.mirror = primary.m_flat.mirror;
    m_flat.grads = at::zeros_like(primary.m_flat.grads);
    // The primary's parameters, each with the gradient at the same place in this worker's buffer.
    const float* base = primary.m_flat.grads.data_ptr<float>();
    const auto mine = [&](const Param& p) {
        Param q = p;
        q.g = m_flat.grads.narrow(0, p.g.data_ptr<float>() - base, p.g.numel()).view(p.g.sizes());
        return q;
    };
    m_wte = mine(primary.m_wte);
    m_wpe = mine(primary.m_wpe);
    m_lnFw = mine(primary.m_lnFw);
    m_lnFb = mine(primary.m_lnFb);
    m_blocks.resize(primary.m_blocks.size());
    for (std::size_t i = 0; i < m_blocks.size(); ++i) {
        auto& k = m_blocks[i];
        const auto& p = primary.m_blocks[i];
        for (auto [mineOf, theirs] : {std::pair{&k.ln1w, &p.ln1w},
                                      {&k.ln1b, &p.ln1b},
                                      {&k.attnW, &p.attnW},
                                      {&k.attnB, &p.attnB},
                                      {&k.projW, &p.projW},
                                      {&k.projB, &p.projB},
                                      {&k.ln2w, &p.ln2w},
                                      {&k.ln2b, &p.ln2b},
                                      {&k.fcW, &p.fcW},
                                      {&k.fcB, &p.fcB},
                                      {&k.mlpW, &p.mlpW},
                                      {&k.mlpB, &p.mlpB}}) {
            *mineOf = mine(*theirs);
        }
    }
    allocate(sequences);
}

void GptStep::allocate(std::int64_t sequences) {
    const auto f = at::TensorOptions().dtype(at::kFloat);
    const auto act = at::TensorOptions().dtype(m_bf16 ? at::kBFloat16 : at::kFloat);
    const auto seq = m_seq;
    const bool bf16 = m_bf16;
    const auto n = sequences * seq, c = m_width, bh = sequences * m_heads, d = c / m_heads;
    m_tiles = cpu::tiledAttentionPays(d);
    const auto pRow = m_tiles ? cpu::attentionRowStride(seq) : seq;
    for (auto& k : m_blocks) {
        k.a = at::empty({n, c}, act);
        k.mean1 = at::empty({n}, f);
        k.rstd1 = at::empty({n}, f);
        if (m_tiles) {
            k.qkv = at::empty({n, 3 * c}, f);
        } else {
            k.qh = at::empty({bh * seq * d}, f);
            k.kh = at::empty({bh * seq * d}, f);
            k.vh = at::empty({bh * seq * d}, f);
        }
        k.p = at::empty({bh * seq * pRow}, f);
        k.y = at::empty({n, c}, act);
        k.mid = at::empty({n, c}, f);
        k.m = at::empty({n, c}, act);
        k.mean2 = at::empty({n}, f);
        k.rstd2 = at::empty({n}, f);
        k.f = at::empty({n, 4 * c}, f);
        k.g = at::empty({n, 4 * c}, act);
    }
    for (std::size_t i = 0; i <= m_blocks.size(); ++i) {
        m_h.push_back(at::empty({n, c}, f));
    }
    m_z = at::empty({n, c}, act);
    m_meanF = at::empty({n}, f);
    m_rstdF = at::empty({n}, f);
    m_logits = at::empty({n, m_vocabulary}, f);
    m_dlogits = at::empty({n, m_vocabulary}, f);
    const auto i64 = at::TensorOptions().dtype(at::kLong);
    m_tokens = at::empty({n}, i64);
    m_targets = at::empty({n}, i64);
    m_qkv = at::empty({n, 3 * c}, f);
    m_narrow = at::empty({n, c}, f);
    m_wide = at::empty({n, 4 * c}, f);
    m_dh = at::empty({n, c}, f);
    if (m_dropout > 0) {
        m_masked = at::empty({n, c}, f);
    }
    if (!m_tiles || bf16) {
        m_heads1 = at::empty({bh * seq * d}, f);
    }
    if (!m_tiles) {
        for (auto* t : {&m_dq, &m_dk, &m_dv}) {
            *t = at::empty({bh * seq * d}, f);
        }
        m_dp = at::empty({bh * seq * seq}, f);
    }
    if (bf16) {
        m_actNarrow = at::empty({n, c}, act);
        m_actQkv = at::empty({n, 3 * c}, act);
        m_actWide = at::empty({n, 4 * c}, act);
        m_actLogits = at::empty({n, m_vocabulary}, act);
    }
}

GptStep::~GptStep() = default;

void GptStep::gemm(const at::Tensor& a, const at::Tensor& b, at::Tensor c) const {
    if (!m_bf16) {
        at::mm_out(c, a, b);
        return;
    }
    if (m_inF32) {
        // activations already bf16 values in fp32; the weights' bf16 mirror widened once a step
        const auto asF32 = [&](const at::Tensor& t) { return t.scalar_type() == at::kFloat ? t : widened(t); };
        at::mm_out(c, asF32(a), asF32(b));
        return;
    }
    const auto oa = operand(a), ob = operand(b);
    const cpu::GemmShape shape{a.size(0), b.size(1), a.size(1), oa.trans, ob.trans};
    const auto route = m_router->route(shape);
    if (route == cpu::Bf16Route::Fp32) {
        // the fp32 route's arithmetic (MKL's sgemm on the bf16 values), each operand widened once a step
        at::mm_out(c, widened(a), widened(b));
        return;
    }
    cpu::gemmBf16Routed(route, shape, bf16(a), oa.ld, bf16(b), ob.ld, f32(c), c.stride(0));
}

at::Tensor GptStep::widened(const at::Tensor& t) const {
    const auto o = operand(t);
    const auto stored = o.trans ? t.t() : t; // rows of ld apart
    const auto rows = stored.size(0), cols = stored.size(1);
    auto& w = m_widened[{stored.data_ptr(), rows, cols, o.ld}];
    if (!w.values.defined() || w.step != m_pass) {
        if (!w.values.defined()) {
            w.values = at::empty({rows, cols}, at::TensorOptions().dtype(at::kFloat));
        }
        cpu::widenRows(bf16(stored), o.ld, rows, cols, f32(w.values), cols);
        w.step = m_pass;
    }
    return o.trans ? w.values.t() : w.values;
}

void GptStep::rewritten(const at::Tensor& buffer) const {
    const void* p = buffer.data_ptr();
    for (auto& [key, w] : m_widened) {
        if (std::get<0>(key) == p) {
            w.step = 0; // stale (passes count from 1)
        }
    }
}

at::Tensor GptStep::gemmInput(const at::Tensor& f32Values, const at::Tensor& buffer) const {
    if (!m_bf16) {
        return f32Values;
    }
    auto out = buffer.narrow(0, 0, f32Values.size(0));
    if (m_inF32) {
        cpu::roundToBf16(f32(f32Values), inF32(out), f32Values.numel());
        return out;
    }
    cpu::toBf16(f32(f32Values), bf16(out), f32Values.numel());
    rewritten(buffer);
    return out;
}

at::Tensor GptStep::biasGradAndInput(const at::Tensor& grad, float* biasGrad, const at::Tensor& buffer) const {
    if (!m_bf16) {
        cpu::columnSums(f32(grad), grad.size(0), grad.size(1), biasGrad);
        return grad;
    }
    auto out = buffer.narrow(0, 0, grad.size(0));
    if (m_inF32) {
        cpu::columnSums(f32(grad), grad.size(0), grad.size(1), biasGrad, inF32(out));
        return out;
    }
    cpu::columnSums(f32(grad), grad.size(0), grad.size(1), biasGrad, bf16(out));
    rewritten(buffer);
    return out;
}

void GptStep::keepGemmInputsInF32() {
    const auto f = at::TensorOptions().dtype(at::kFloat);
    const auto like = [&](at::Tensor& t) { t = at::empty(t.sizes(), f); };
    for (auto& k : m_blocks) {
        for (auto* t : {&k.a, &k.y, &k.m, &k.g}) {
            like(*t);
        }
    }
    for (auto* t : {&m_z, &m_actNarrow, &m_actQkv, &m_actWide, &m_actLogits}) {
        like(*t);
    }
    m_widened.clear(); // the weights' copies come back at their next use
    m_inF32 = true;
}

// One block's attention, from the layer norm's output k.a to the projection's input k.y.
void GptStep::attentionForward(Block& k, std::int64_t batch, std::int64_t seq) {
    const auto n = batch * seq, c = m_width, heads = m_heads, d = c / heads, bh = batch * heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const float* bias = f32(k.attnB.w);
    if (m_tiles) {
        // q, k, v straight out of the GEMM's rows; y straight into the projection's input.
        auto qkv = rowsOf(k.qkv, n);
        gemm(rowsOf(k.a, n), weight(k.attnW).t(), qkv);
        cpu::addBias(f32(qkv), bias, n, 3 * c);
        const cpu::AttentionShape shape{batch, heads, seq, d, 3 * c, c};
        float* y = m_bf16 ? f32(m_heads1) : f32(k.y);
        cpu::causalAttentionForward(shape, f32(qkv), f32(qkv) + c, f32(qkv) + 2 * c, scale, f32(k.p), y);
        if (m_inF32) {
            cpu::roundToBf16(y, inF32(k.y), n * c);
        } else if (m_bf16) {
            cpu::toBf16(y, bf16(k.y), n * c);
        }
    } else {
        auto qkv = rowsOf(m_qkv, n);
        gemm(rowsOf(k.a, n), weight(k.attnW).t(), qkv);
        cpu::splitHeads(f32(qkv), 3 * c, bias, batch, seq, heads, d, f32(k.qh));
        cpu::splitHeads(f32(qkv) + c, 3 * c, bias + c, batch, seq, heads, d, f32(k.kh));
        cpu::splitHeads(f32(qkv) + 2 * c, 3 * c, bias + 2 * c, batch, seq, heads, d, f32(k.vh));
        auto yh = mats(m_heads1, bh, seq, d);
        auto p = mats(k.p, bh, seq, seq);
        at::bmm_out(p, mats(k.qh, bh, seq, d), mats(k.kh, bh, seq, d).transpose(1, 2));
        cpu::causalSoftmax(f32(p), bh, seq, scale);
        at::bmm_out(yh, p, mats(k.vh, bh, seq, d));
        withAct(k.y, m_inF32, [&](auto* out) { cpu::mergeHeads(f32(yh), batch, seq, heads, d, out, c); });
    }
}

// Its backward: from the projection input's gradient (m_narrow) to qkv's (m_qkv).
void GptStep::attentionBackward(Block& k, std::int64_t batch, std::int64_t seq) {
    const auto n = batch * seq, c = m_width, heads = m_heads, d = c / heads, bh = batch * heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    auto dqkv = rowsOf(m_qkv, n);
    auto narrow = rowsOf(m_narrow, n);
    if (m_tiles) {
        const cpu::AttentionShape shape{batch, heads, seq, d, 3 * c, c};
        const float* qkv = f32(k.qkv);
        cpu::causalAttentionBackward(shape, qkv, qkv + c, qkv + 2 * c, f32(k.p), f32(narrow), scale, f32(dqkv),
                                     f32(dqkv) + c, f32(dqkv) + 2 * c);
    } else {
        auto dyh = mats(m_heads1, bh, seq, d);
        cpu::splitHeads(f32(narrow), c, nullptr, batch, seq, heads, d, f32(dyh));
        auto dq = mats(m_dq, bh, seq, d), dk = mats(m_dk, bh, seq, d), dv = mats(m_dv, bh, seq, d);
        auto p = mats(k.p, bh, seq, seq);
        auto dp = mats(m_dp, bh, seq, seq);
        at::bmm_out(dp, dyh, mats(k.vh, bh, seq, d).transpose(1, 2));
        at::bmm_out(dv, p.transpose(1, 2), dyh);
        cpu::causalSoftmaxBackward(f32(p), f32(dp), bh, seq, scale);
        at::bmm_out(dq, dp, mats(k.kh, bh, seq, d));
        at::bmm_out(dk, dp.transpose(1, 2), mats(k.qh, bh, seq, d));
        cpu::mergeHeads(f32(dq), batch, seq, heads, d, f32(dqkv), 3 * c);
        cpu::mergeHeads(f32(dk), batch, seq, heads, d, f32(dqkv) + c, 3 * c);
        cpu::mergeHeads(f32(dv), batch, seq, heads, d, f32(dqkv) + 2 * c, 3 * c);
    }
}

void GptStep::forward(std::int64_t batch, std::int64_t seq, double& lossSum, std::int64_t& correct) {
    const auto n = batch * seq, c = m_width;
    ++m_pass; // the activations and the weights' bf16 mirror are new: no widened copy holds
    if (!cpu::embedTokens(f32(m_wte.w), m_vocabulary, f32(m_wpe.w), m_tokens.data_ptr<std::int64_t>(), seq, batch, seq,
                          c, f32(m_h[0]))) {
        throw Error(fmt::format("a token outside the network's vocabulary of {}", m_vocabulary));
    }
    const float dropout = m_training ? m_dropout : 0.0f;
    if (dropout > 0) {
        cpu::dropoutValues(f32(m_h[0]), n * c, dropout, m_seeds[0], f32(m_h[0]), m_firstRow * c);
    }
    for (std::size_t l = 0; l < m_blocks.size(); ++l) {
        auto& k = m_blocks[l];
        const float* x = f32(m_h[l]);
        withAct(k.a, m_inF32, [&](auto* out) {
            cpu::layerNormRows(x, n, c, f32(k.ln1w.w), f32(k.ln1b.w), out, f32(k.mean1), f32(k.rstd1));
        });
        attentionForward(k, batch, seq);
        auto o = rowsOf(m_narrow, n);
        gemm(rowsOf(k.y, n), weight(k.projW).t(), o);
        cpu::addRowsBias(x, f32(o), f32(k.projB.w), n, c, f32(k.mid), dropout, seedOf(l, 0), m_firstRow);
        withAct(k.m, m_inF32, [&](auto* out) {
            cpu::layerNormRows(f32(k.mid), n, c, f32(k.ln2w.w), f32(k.ln2b.w), out, f32(k.mean2), f32(k.rstd2));
        });
        gemm(rowsOf(k.m, n), weight(k.fcW).t(), rowsOf(k.f, n));
        withAct(k.g, m_inF32, [&](auto* out) { cpu::biasGelu(f32(k.f), f32(k.fcB.w), n, 4 * c, out); });
        gemm(rowsOf(k.g, n), weight(k.mlpW).t(), o);
        cpu::addRowsBias(f32(k.mid), f32(o), f32(k.mlpB.w), n, c, f32(m_h[l + 1]), dropout, seedOf(l, 1), m_firstRow);
    }
    withAct(m_z, m_inF32, [&](auto* out) {
        cpu::layerNormRows(f32(m_h.back()), n, c, f32(m_lnFw.w), f32(m_lnFb.w), out, f32(m_meanF), f32(m_rstdF));
    });
    gemm(rowsOf(m_z, n), weight(m_wte).t(), rowsOf(m_logits, n));
    const auto ce = cpu::tokenCrossEntropy(f32(m_logits), m_targets.data_ptr<std::int64_t>(), n, m_vocabulary,
                                           f32(m_dlogits), m_meanOver);
    if (ce.badLabel) {
        throw Error(fmt::format("a target token outside the network's vocabulary of {}", m_vocabulary));
    }
    lossSum = ce.lossSum;
    correct = ce.correct;
}

void GptStep::backward(std::int64_t batch, std::int64_t seq) {
    const auto n = batch * seq, c = m_width;
    auto narrow = rowsOf(m_narrow, n);
    auto dh = rowsOf(m_dh, n);
    // The head (tied to the token embedding): its gradient is written here, the embedding's added last.
    const auto dl = gemmInput(rowsOf(m_dlogits, n), m_actLogits);
    gemm(dl, weight(m_wte), narrow);
    gemm(dl.t(), rowsOf(m_z, n), m_wte.g);
    dh.zero_();
    cpu::layerNormBackwardRows(f32(narrow), f32(m_h.back()), f32(m_meanF), f32(m_rstdF), f32(m_lnFw.w), n, c, f32(dh));
    cpu::layerNormParamGrads(f32(narrow), f32(m_h.back()), f32(m_meanF), f32(m_rstdF), n, c, f32(m_lnFw.g),
                             f32(m_lnFb.g));
    for (auto l = static_cast<std::int64_t>(m_blocks.size()) - 1; l >= 0; --l) {
        auto& k = m_blocks[static_cast<std::size_t>(l)];
        // The MLP: dh is the gradient of the block's output.
        auto dhIn =
            biasGradAndInput(throughDropout(dh, seedOf(static_cast<std::size_t>(l), 1)), f32(k.mlpB.g), m_actNarrow);
        gemm(dhIn.t(), rowsOf(k.g, n), k.mlpW.g);
        auto wide = rowsOf(m_wide, n);
        gemm(dhIn, weight(k.mlpW), wide);
        cpu::geluBackward(f32(wide), f32(k.f), n * 4 * c);
        const auto dfIn = biasGradAndInput(wide, f32(k.fcB.g), m_actWide);
        gemm(dfIn.t(), rowsOf(k.m, n), k.fcW.g);
        gemm(dfIn, weight(k.fcW), narrow);
        cpu::layerNormBackwardRows(f32(narrow), f32(k.mid), f32(k.mean2), f32(k.rstd2), f32(k.ln2w.w), n, c, f32(dh));
        cpu::layerNormParamGrads(f32(narrow), f32(k.mid), f32(k.mean2), f32(k.rstd2), n, c, f32(k.ln2w.g),
                                 f32(k.ln2b.g));
        // Attention: dh is now the gradient of the stream after it.
        dhIn =
            biasGradAndInput(throughDropout(dh, seedOf(static_cast<std::size_t>(l), 0)), f32(k.projB.g), m_actNarrow);
        gemm(dhIn.t(), rowsOf(k.y, n), k.projW.g);
        gemm(dhIn, weight(k.projW), narrow);
        attentionBackward(k, batch, seq);
        const auto dqkv = rowsOf(m_qkv, n);
        const auto dqkvIn = biasGradAndInput(dqkv, f32(k.attnB.g), m_actQkv);
        gemm(dqkvIn.t(), rowsOf(k.a, n), k.attnW.g);
        gemm(dqkvIn, weight(k.attnW), narrow);
        cpu::layerNormBackwardRows(f32(narrow), f32(m_h[static_cast<std::size_t>(l)]), f32(k.mean1), f32(k.rstd1),
                                   f32(k.ln1w.w), n, c, f32(dh));
        cpu::layerNormParamGrads(f32(narrow), f32(m_h[static_cast<std::size_t>(l)]), f32(k.mean1), f32(k.rstd1), n, c,
                                 f32(k.ln1w.g), f32(k.ln1b.g));
    }
    if (m_dropout > 0) {
        cpu::dropoutValues(f32(dh), n * c, m_dropout, m_seeds[0], f32(dh), m_firstRow * c);
    }
    cpu::embedTokensBackward(f32(dh), m_tokens.data_ptr<std::int64_t>(), seq, batch, seq, c, f32(m_wte.g),
                             f32(m_wpe.g));
    if (seq < m_wpe.g.size(0)) {
        m_wpe.g.narrow(0, seq, m_wpe.g.size(0) - seq).zero_();
    }
}

at::Tensor GptStep::throughDropout(const at::Tensor& grad, std::uint64_t seed) const {
    if (m_dropout <= 0) {
        return grad;
    }
    auto out = m_masked.narrow(0, 0, grad.size(0));
    cpu::dropoutValues(f32(grad), grad.numel(), m_dropout, seed, f32(out), m_firstRow * grad.size(1));
    return out;
}

std::int64_t GptStep::workersFor(std::int64_t batch) const { return std::min(m_maxWorkers, batch); }

void GptStep::sumWorkersGradients(std::int64_t workers) {
    if (workers < 2) {
        return;
    }
    // One pass: each value read once from every worker's buffer (W - 1 additions would read this
    // step's buffer W - 1 times), in worker order whatever the threads.
    std::vector<const float*> theirs;
    for (std::int64_t w = 1; w < workers; ++w) {
        theirs.push_back(f32(part(w).m_flat.grads));
    }
    float* mine = f32(m_flat.grads);
    at::parallel_for(0, m_flat.grads.numel(), 1 << 14, [&](std::int64_t begin, std::int64_t end) {
        for (const float* other : theirs) {
            for (auto i = begin; i < end; ++i) {
                mine[i] += other[i];
            }
        }
    });
}

void GptStep::step(const at::Tensor& x, const at::Tensor& y, at::Generator& gen, LaneOptimizer& optimizer,
                   at::Tensor& loss, at::Tensor& correct, StepTimer* timer) {
    const auto batch = x.size(0), seq = x.size(1);
    if (x.dim() != 2 || y.sizes() != x.sizes() || batch > m_maxBatch || seq > m_seq || seq > m_wpe.w.size(0)) {
        throw Error(fmt::format("a batch of {} x {} tokens; the fused transformer step was built for {} x {}", batch,
                                seq, m_maxBatch, m_seq));
    }
    // One seed per dropout in the module's forward order (the embeddings', then each block's
    // attention and MLP outputs'), as laneDropout draws them.
    m_seeds.clear();
    if (m_dropout > 0) {
        for (std::size_t i = 0; i < 1 + 2 * m_blocks.size(); ++i) {
            m_seeds.push_back(dropoutSeed(gen));
        }
    }
    double lossSum = 0;
    std::int64_t right = 0;
    runParts(x, y, true, lossSum, right, timer);
    loss.fill_(lossSum / static_cast<double>(batch * seq));
    correct.fill_(right);
    if (timer) {
        timer->mark(Phase::Backward);
    }
    optimizer.step();
    if (m_bf16 && !m_routesSettled) {
        // Every GEMM shape of a full batch has its route now. If each is fp32, the loops write the
        // GEMMs' inputs as bf16 values in fp32 storage from the next step on: the same values and
        // sums, without a bf16 copy written here and widened again there. A smaller last batch's
        // shapes then run in fp32 too.
        m_routesSettled = true;
        if (m_inF32Allowed && m_router->onlyFp32()) {
            for (std::int64_t w = 0; w < m_maxWorkers; ++w) {
                part(w).keepGemmInputsInF32();
            }
        }
    }
    if (timer) {
        timer->mark(Phase::Optimizer);
    }
}

std::optional<FusedStep::Evaluation> GptStep::evaluate(const at::Tensor& x, const at::Tensor& y) {
    const auto seq = x.size(1);
    if (x.dim() != 2 || y.sizes() != x.sizes() || seq > m_seq || seq > m_wpe.w.size(0)) {
        return std::nullopt; // (the module evaluates it)
    }
    Evaluation out;
    for (std::int64_t i = 0; i < x.size(0); i += m_maxBatch) {
        const auto take = std::min(m_maxBatch, x.size(0) - i);
        double lossSum = 0;
        std::int64_t right = 0;
        runParts(x.narrow(0, i, take), y.narrow(0, i, take), false, lossSum, right, nullptr);
        out.lossSum += lossSum;
        out.correct += right;
    }
    return out;
}

void GptStep::runParts(const at::Tensor& x, const at::Tensor& y, bool train, double& lossSum, std::int64_t& right,
                       StepTimer* timer) {
    const auto batch = x.size(0), seq = x.size(1), n = batch * seq;
    // Worker w's sequences [first[w], first[w + 1]); each part's masks and loss are the batch's.
    const auto workers = workersFor(batch);
    std::vector<std::int64_t> first(static_cast<std::size_t>(workers) + 1);
    for (std::int64_t w = 0; w <= workers; ++w) {
        first[static_cast<std::size_t>(w)] = batch * w / workers;
    }
    const auto sequencesOf = [&](std::int64_t w) {
        return first[static_cast<std::size_t>(w) + 1] - first[static_cast<std::size_t>(w)];
    };
    for (std::int64_t w = 0; w < workers; ++w) {
        auto& s = part(w);
        const auto b0 = first[static_cast<std::size_t>(w)], rows = sequencesOf(w) * seq;
        if (w > 0 && train) {
            s.m_seeds = m_seeds;
        }
        s.m_training = train;
        s.m_firstRow = b0 * seq;
        s.m_meanOver = n;
        s.m_tokens.narrow(0, 0, rows).view({sequencesOf(w), seq}).copy_(x.narrow(0, b0, sequencesOf(w)));
        s.m_targets.narrow(0, 0, rows).view({sequencesOf(w), seq}).copy_(y.narrow(0, b0, sequencesOf(w)));
    }
    if (timer) {
        timer->mark(Phase::Data);
    }
    std::vector<double> lossSums(static_cast<std::size_t>(workers), 0.0);
    std::vector<std::int64_t> rights(static_cast<std::size_t>(workers), 0);
    const auto forwardOf = [&](std::int64_t w) {
        part(w).forward(sequencesOf(w), seq, lossSums[static_cast<std::size_t>(w)],
                        rights[static_cast<std::size_t>(w)]);
    };
    if (workers > 1 && m_routedSplits.count({batch, seq}) > 0) {
        // One region: each worker's forward and backward on its own thread (worker 0 on this one).
        eachWorker(workers, [&](std::int64_t w) {
            forwardOf(w);
            if (w == 0 && timer) {
                timer->mark(Phase::Forward);
            }
            if (train) {
                part(w).backward(sequencesOf(w), seq);
            }
        });
    } else {
        // One part, or a split's first pass of this shape: part by part on the lane's threads.
        for (std::int64_t w = 0; w < workers; ++w) {
            forwardOf(w);
        }
        if (timer) {
            timer->mark(Phase::Forward);
        }
        for (std::int64_t w = 0; w < workers && train; ++w) {
            part(w).backward(sequencesOf(w), seq);
        }
        if (workers > 1) {
            m_routedSplits.insert({batch, seq});
        }
    }
    for (std::int64_t w = 0; w < workers; ++w) {
        lossSum += lossSums[static_cast<std::size_t>(w)];
        right += rights[static_cast<std::size_t>(w)];
    }
    if (train) {
        sumWorkersGradients(workers);
    }
}

std::string GptStep::describe() const {
    const char* attention = m_tiles ? "causal attention tiles" : "attention by bmm";
    if (!m_bf16) {
        return fmt::format("fused transformer step ({})", attention);
    }
    auto routes = m_router->summary();
    if (routes.empty()) {
        routes = "each shape's fastest route, timed at its first use";
    }
    return fmt::format("fused transformer step (bf16 GEMMs with fp32 results: {}; {}fp32 {} and master weights)",
                       routes, m_inF32 ? "their bf16 inputs kept in fp32 storage, read without widening; " : "",
                       attention);
}

std::string GptStep::describeThreads() const {
    const int threads = at::get_num_threads();
    if (m_maxWorkers > 1) {
        return fmt::format("each step's sequences split over {} threads, one share a thread, their gradients summed",
                           m_maxWorkers);
    }
    return threads > 1 ? fmt::format("each GEMM and loop split over {} threads", threads) : "";
}

} // namespace devicerace::detail
