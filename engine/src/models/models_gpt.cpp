// The decoder-only transformer: nanoGPT's model.py (GPT-2 style), character level.
#include <ATen/autocast_mode.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/nn/functional.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>

#include "models/models.h"

namespace devicerace::detail {

namespace F = torch::nn::functional;

namespace {

struct GptShape {
    std::int64_t layers, heads, width, context;
    double dropout;
};

// nanoGPT's initialisation: N(0, 0.02) for every matmul weight and embedding, zero biases,
// LayerNorm 1/0, and the residual projections at N(0, 0.02 / sqrt(2 * layers)).
constexpr double kInitStd = 0.02;

// One pre-LayerNorm block: x + attn(ln1(x)), then x + mlp(ln2(x)).
struct GptBlock : torch::nn::Module {
    GptBlock(const GptShape& s, at::Generator& gen) : m_heads(s.heads), m_drop(s.dropout) {
        const auto c = s.width;
        ln1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
        attn = register_module("c_attn", torch::nn::Linear(c, 3 * c));
        attnProj = register_module("attn_c_proj", torch::nn::Linear(c, c));
        ln2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
        fc = register_module("c_fc", torch::nn::Linear(c, 4 * c));
        mlpProj = register_module("mlp_c_proj", torch::nn::Linear(4 * c, c));
        torch::NoGradGuard noGrad;
        const double projStd = kInitStd / std::sqrt(2.0 * static_cast<double>(s.layers));
        for (auto* l : {&attn, &attnProj, &fc, &mlpProj}) {
            (*l)->weight.normal_(0, l == &attnProj || l == &mlpProj ? projStd : kInitStd, gen);
            (*l)->bias.zero_();
        }
    }
    // routes: a bf16 lane's dense layers by each GEMM shape's fastest route (models.h dense()).
    torch::Tensor forward(const torch::Tensor& x, at::Generator& gen, bool hashed, DenseRoutes* routes) {
        const auto b = x.size(0), t = x.size(1), c = x.size(2);
        auto qkv = dense(*attn, ln1->forward(x), routes).split(c, 2);
        auto heads = [&](const torch::Tensor& v) { return v.view({b, t, m_heads, c / m_heads}).transpose(1, 2); };
        auto y = causalAttention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
        y = y.transpose(1, 2).contiguous().view({b, t, c});
        auto h = x + laneDropout(dense(*attnProj, y, routes), m_drop, is_training(), gen, hashed);
        auto m = dense(*mlpProj, F::gelu(dense(*fc, ln2->forward(h), routes)), routes);
        return h + laneDropout(m, m_drop, is_training(), gen, hashed);
    }
    torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
    torch::nn::Linear attn{nullptr}, attnProj{nullptr}, fc{nullptr}, mlpProj{nullptr};
    std::int64_t m_heads;
    double m_drop;
};

// Token + learned position embeddings, the blocks, a final LayerNorm, and the output head tied
// to the token embedding (no bias of its own).
struct CharGpt : Net {
    CharGpt(at::Generator initGen, const GptShape& s, std::int64_t vocabulary, const FastPaths& fast) : m_shape(s) {
        gen = std::move(initGen);
        hashedDropout = fast.hashedDropout && s.dropout > 0;
        // a bf16 lane's dense layers, in evaluation (the fused step trains without them) and in
        // an autograd lane's training
        denseRoutes = denseRoutesFor(fast);
        wte = register_module("wte", torch::nn::Embedding(vocabulary, s.width));
        wpe = register_module("wpe", torch::nn::Embedding(s.context, s.width));
        {
            torch::NoGradGuard noGrad;
            wte->weight.normal_(0, kInitStd, gen);
            wpe->weight.normal_(0, kInitStd, gen);
        }
        for (std::int64_t i = 0; i < s.layers; ++i) {
            blocks.push_back(register_module("h" + std::to_string(i), std::make_shared<GptBlock>(s, gen)));
        }
        lnF = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.width})));
    }
    std::optional<GptView> gptView() override {
        GptView v;
        v.heads = m_shape.heads;
        v.dropout = m_shape.dropout;
        v.wte = wte->weight;
        v.wpe = wpe->weight;
        v.lnFWeight = lnF->weight;
        v.lnFBias = lnF->bias;
        for (auto& b : blocks) {
            v.blocks.push_back({b->ln1->weight, b->ln1->bias, b->attn->weight, b->attn->bias, b->attnProj->weight,
                                b->attnProj->bias, b->ln2->weight, b->ln2->bias, b->fc->weight, b->fc->bias,
                                b->mlpProj->weight, b->mlpProj->bias});
        }
        return v;
    }
    /// (B, T) token ids, T <= context -> (B, T, V) logits.
    torch::Tensor forward(const torch::Tensor& x) override {
        const auto t = x.size(1);
        auto pos = torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(x.device()));
        auto h = laneDropout(wte->forward(x) + wpe->forward(pos), m_shape.dropout, is_training(), gen, hashedDropout);
        for (auto& block : blocks) {
            h = block->forward(h, gen, hashedDropout, denseRoutes.get());
        }
        return dense(wte->weight, {}, lnF->forward(h), denseRoutes.get()); // the tied head
    }
    GptShape m_shape;
    torch::nn::Embedding wte{nullptr}, wpe{nullptr};
    std::vector<std::shared_ptr<GptBlock>> blocks;
    torch::nn::LayerNorm lnF{nullptr};
};

WorkloadImpl gptWorkload(const std::string& name, const GptShape& s, std::int64_t batch, const std::string& what,
                         double targetAccuracy, double targetLoss) {
    return {
        .info = {.name = name,
                 .description = what,
                 .dataset = "text",
                 .origin = "karpathy/nanoGPT model.py (GPT-2 style), character level",
                 .optimizer = "AdamW(lr=1e-3, betas=(0.9, 0.99), wd=0.1 on matrices), clip 1.0",
                 .defaultBatch = batch,
                 .defaultLr = 1e-3,
                 .weightDecay = 0.1,
                 .schedule = "cosine",
                 .defaultEpochs = 1,
                 .defaultTarget = targetAccuracy, // next-character accuracy, when a race asks for one
                 .defaultTargetLoss = targetLoss,
                 .input = DataKind::Tokens,
                 .inputShape = {s.context + 1},
                 .classes = 65, // tiny-shakespeare's alphabet; the text's own alphabet at run time
                 .vocabulary = 65,
                 .samplesText = true,
                 .tokensPerSample = s.context},
        .task = Task::LanguageModel,
        .makeModel =
            [s](at::Generator g, const ModelOptions& o) {
                return std::make_shared<CharGpt>(std::move(g), s, o.vocabulary > 0 ? o.vocabulary : 65, o.fast);
            },
        .optimizer = {.kind = OptimizerRecipe::Kind::AdamW, .beta2 = 0.99, .decayMatricesOnly = true, .clipNorm = 1.0},
        .network = {{"layers", static_cast<double>(s.layers)},
                    {"heads", static_cast<double>(s.heads)},
                    {"width", static_cast<double>(s.width)},
                    {"context", static_cast<double>(s.context)},
                    {"dropout", s.dropout}}};
}

} // namespace

// Causal attention in one fused kernel: flash / memory-efficient on CUDA, the fused CPU kernel on
// CPUs. A bf16 CPU lane attends in fp32 where PyTorch 2.11's CPU flash attention is slower in bf16
// than in fp32 (short sequences, or heads narrower than 64), and in bf16 where it is the faster one
// even with the casts to fp32 and back (long sequences with heads of 64: char-gpt-6l); the timings
// are in docs/BENCHMARKS.md ("CPU speed"). Its GEMMs stay in bf16 either way.
bool bf16AttentionPays(std::int64_t sequence, std::int64_t headSize) { return sequence >= 192 && headSize >= 64; }

torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    if (!q.is_cpu() || !at::autocast::is_autocast_enabled(at::kCPU) ||
        at::autocast::get_autocast_dtype(at::kCPU) != at::kBFloat16 || bf16AttentionPays(q.size(-2), q.size(-1))) {
        return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
    }
    c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::DispatchKey::AutocastCPU);
    return at::scaled_dot_product_attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), {}, 0.0,
                                            /*is_causal=*/true);
}

std::int64_t gptParameterCount(std::int64_t layers, std::int64_t width, std::int64_t context, std::int64_t vocabulary) {
    // Per block: two LayerNorms (2C each), qkv (3C^2 + 3C), projection (C^2 + C), MLP up
    // (4C^2 + 4C) and down (4C^2 + C) = 12C^2 + 13C; plus the token and position embeddings
    // and the final LayerNorm; the head shares the token embedding.
    const auto c = width;
    return layers * (12 * c * c + 13 * c) + vocabulary * c + context * c + 2 * c;
}

std::vector<WorkloadImpl> gptWorkloads() {
    // The validation losses the clock stops at by default: char-gpt reaches 2.2 after ~1,100
    // steps of the CPU config on the fortunes text (docs/WORKLOADS.md).
    return {gptWorkload("char-gpt", {4, 4, 128, 64, 0.0}, 12,
                        "nanoGPT's CPU config: 4 layers, 4 heads, 128 wide, context 64; writes text", 0.5, 2.2),
            gptWorkload("char-gpt-6l", {6, 6, 384, 256, 0.2}, 64,
                        "nanoGPT's train_shakespeare_char: 6 layers, 6 heads, 384 wide, context 256", 0.55, 1.8)};
}

} // namespace devicerace::detail
