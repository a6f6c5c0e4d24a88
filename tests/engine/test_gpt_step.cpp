// The fused transformer step (engine train/fused/gpt_step.h) computes what autograd computes: on
// char-gpt, one step's loss, correct count and every parameter's gradient match the module's
// forward + backward (fp32 tightly, bf16 in direction), for full and shorter sequences, with
// dropout (char-gpt-6l), and with either attention (the causal tiles or bmm); the tiles follow
// torch's attention in double on their own; its GELU follows the exact erf form and its layer
// norm loops torch's layer norm; and it says why it does not take a lane it cannot run.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <utility>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "devicerace/errors.h"
#include "kernels/attention_kernels.h"
#include "kernels/gpt_kernels.h"
#include "kernels/mkl_gemm.h"
#include "models/models.h"
#include "train/fused/gpt_step.h"
#include "train/lane_optimizer.h"

using namespace devicerace;
using namespace devicerace::detail;

namespace {

constexpr std::int64_t kVocabulary = 65;
constexpr std::int64_t kContext = 64; // char-gpt's

struct CountingOptimizer final : LaneOptimizer {
    void setLr(double) override {}
    void zeroGrad() override {}
    void step() override { ++steps; }
    bool captureSafe() const override { return false; }
    std::string describe() const override { return "counting"; }
    int steps = 0;
};

std::shared_ptr<Net> charGpt(const std::string& workload = "char-gpt") {
    ModelOptions o;
    o.vocabulary = kVocabulary;
    o.fast.hashedDropout = true; // the masks the fused step draws
    auto net = workloadImpl(workload).makeModel(at::detail::createCPUGenerator(7), o);
    net->train();
    return net;
}

// [batch, seq + 1] token ids: the inputs and, shifted by one, the targets.
torch::Tensor tokens(std::int64_t batch, std::int64_t seq) {
    auto gen = at::detail::createCPUGenerator(11);
    return torch::randint(0, kVocabulary, {batch, seq + 1}, gen, torch::kLong);
}

// The parameter's gradient in the fused step's flat buffer (the module's tensor views it).
torch::Tensor gradOf(const torch::Tensor& param, GptStep& step) {
    const auto offset = param.data_ptr<float>() - step.flat().params.data_ptr<float>();
    return step.flat().grads.narrow(0, offset, param.numel()).view(param.sizes());
}

struct Reference {
    double loss = 0;
    std::int64_t correct = 0;
};

// Autograd: the mean cross-entropy over every position, and its gradients.
Reference autogradStep(Net& net, const torch::Tensor& x, const torch::Tensor& y) {
    auto logits = net.forward(x);
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
    loss.backward();
    return {loss.item<double>(), logits.argmax(-1).eq(y).sum().item<std::int64_t>()};
}

struct FusedResult {
    double loss = 0;
    std::int64_t correct = 0;
};

// `gen`: dropout's source (the module's own generator, so both sides draw the same masks).
FusedResult fusedStep(GptStep& step, const torch::Tensor& x, const torch::Tensor& y, at::Generator gen) {
    CountingOptimizer optimizer;
    auto loss = torch::zeros({});
    auto correct = torch::zeros({}, torch::kLong);
    step.step(x, y, gen, optimizer, loss, correct);
    EXPECT_EQ(optimizer.steps, 1);
    return {loss.item<double>(), correct.item<std::int64_t>()};
}

// Returns how the step shares its threads (GptStep::describeThreads).
std::string compareSteps(std::int64_t seq, bool bf16, const std::string& workload = "char-gpt", std::int64_t batch = 3,
                         std::int64_t context = kContext) {
    auto fusedNet = charGpt(workload);
    auto referenceNet = charGpt(workload);
    GptStep step(*fusedNet, batch + 1, context, bf16); // a batch smaller than the step was built for
    const auto data = tokens(batch, seq);
    const auto x = data.narrow(1, 0, seq), y = data.narrow(1, 1, seq);
    // A shape's first step runs part by part (its GEMMs' routes timed); the one compared runs as
    // every later step does (a split step's workers in one region). The same dropout masks: the
    // first draws from a copy of the generator.
    fusedStep(step, x, y, fusedNet->gen.clone());
    const auto fused = fusedStep(step, x, y, fusedNet->gen);
    const auto reference = autogradStep(*referenceNet, x, y);
    EXPECT_NEAR(fused.loss, reference.loss, (bf16 ? 1e-2 : 1e-5) * reference.loss);
    if (!bf16) {
        EXPECT_EQ(fused.correct, reference.correct);
    }
    const auto ours = fusedNet->named_parameters();
    const auto theirs = referenceNet->named_parameters();
    EXPECT_EQ(ours.size(), theirs.size());
    for (const auto& item : theirs) {
        const auto g = gradOf(ours[item.key()], step);
        const auto r = item.value().grad();
        if (!r.defined() || r.abs().max().item<double>() == 0) {
            ADD_FAILURE() << item.key() << ": no gradient from autograd";
            continue;
        }
        const double scale = r.abs().max().item<double>();
        if (bf16) {
            const double cosine = (g * r).sum().item<double>() / (g.norm().item<double>() * r.norm().item<double>());
            EXPECT_GT(cosine, 0.99) << item.key() << " at seq " << seq;
        } else {
            const double worst = (g - r).abs().max().item<double>() / scale;
            EXPECT_LT(worst, 1e-3) << item.key() << " at seq " << seq;
        }
    }
    return step.describeThreads();
}

// at::set_num_threads(n) for the scope.
class Threads {
public:
    explicit Threads(int n) : m_before(at::get_num_threads()) { at::set_num_threads(n); }
    ~Threads() { at::set_num_threads(m_before); }
    Threads(const Threads&) = delete;
    Threads& operator=(const Threads&) = delete;

private:
    int m_before;
};

} // namespace

// The step's attention: the causal tiles (AVX-512 CPUs) or bmm (the others), forced either way.
// A bf16 step for 3 sequences, built with each (variable, value) of `env` set (a step reads them
// when it is built).
std::unique_ptr<GptStep> bf16StepWith(Net& net, std::initializer_list<std::pair<const char*, const char*>> env) {
    for (const auto& [name, value] : env) {
        setenv(name, value, 1);
    }
    auto step = std::make_unique<GptStep>(net, 3, kContext, true);
    for (const auto& [name, value] : env) {
        unsetenv(name);
    }
    return step;
}

// The same new weights for each of `steps`, as an optimizer leaves them (the bf16 mirror included).
void shiftWeights(at::Generator& gen, std::initializer_list<GptStep*> steps) {
    const auto shift = torch::randn((*steps.begin())->flat().params.sizes(), gen) * 0.05;
    for (GptStep* step : steps) {
        step->flat().params.add_(shift);
        step->flat().syncMirror();
    }
}

class AttentionRoute {
public:
    explicit AttentionRoute(const char* route) { setenv("DEVICERACE_CPU_ATTENTION", route, 1); }
    ~AttentionRoute() { unsetenv("DEVICERACE_CPU_ATTENTION"); }
    AttentionRoute(const AttentionRoute&) = delete;
    AttentionRoute& operator=(const AttentionRoute&) = delete;
};

TEST(GptStep, Fp32GradientsMatchAutograd) {
    for (const char* route : {"tiles", "bmm"}) {
        SCOPED_TRACE(route);
        AttentionRoute forced(route);
        compareSteps(kContext, false);
        compareSteps(40, false); // shorter sequences: the position rows past them get no gradient
    }
}

// char-gpt-6l: dropout 0.2 after the embeddings and each branch (the same hashed masks as
// laneDropout), heads of 64, a context of 256.
TEST(GptStep, Fp32GradientsMatchAutogradWithDropout) { compareSteps(256, false, "char-gpt-6l", 1, 256); }

// On two threads the step splits the batch's sequences (3: shares of 1 and 2), each worker with its
// own activations and gradients, summed: the same loss, count and gradients as autograd's, each
// share's dropout masks those of its rows in the whole batch; and the same without the split.
TEST(GptStep, ASplitBatchMatchesAutogradWithDropout) {
    const Threads two(2);
    EXPECT_NE(compareSteps(64, false, "char-gpt-6l", 3, 256).find("sequences split over 2 threads"), std::string::npos);
    setenv("DEVICERACE_GPT_SPLIT", "0", 1);
    EXPECT_EQ(compareSteps(64, false, "char-gpt-6l", 3, 256), "each GEMM and loop split over 2 threads");
    unsetenv("DEVICERACE_GPT_SPLIT");
    EXPECT_NE(compareSteps(kContext, true).find("sequences split over 2 threads"), std::string::npos); // bf16
}

// The step's own evaluation gives the module's in eval mode: the summed loss and the hits, without
// dropout (char-gpt-6l's 0.2), over more sequences than the step's batch (chunks of 2, 2 and 1,
// each split over two threads).
TEST(GptStep, EvaluatesAsTheModuleDoesWithoutDropout) {
    const Threads two(2);
    auto fusedNet = charGpt("char-gpt-6l");
    auto referenceNet = charGpt("char-gpt-6l");
    GptStep step(*fusedNet, 2, 256, false);
    const auto data = tokens(5, 64);
    const auto x = data.narrow(1, 0, 64), y = data.narrow(1, 1, 64);
    const auto fused = step.evaluate(x, y);
    ASSERT_TRUE(fused.has_value());
    EXPECT_TRUE(step.evaluates());
    torch::NoGradGuard noGrad;
    referenceNet->eval();
    const auto logits = referenceNet->forward(x);
    const double loss =
        torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}),
                                             torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    EXPECT_NEAR(fused->lossSum, loss, 1e-5 * loss);
    EXPECT_EQ(fused->correct, logits.argmax(-1).eq(y).sum().item<std::int64_t>());
    // Nothing learned, nothing drawn: the same figures (within MKL's rounding: a shape's first pass
    // runs its GEMMs on the lane's threads, later ones on each worker's one).
    const auto again = step.evaluate(x, y);
    ASSERT_TRUE(again.has_value());
    EXPECT_NEAR(again->lossSum, fused->lossSum, 1e-6 * fused->lossSum);
    EXPECT_EQ(again->correct, fused->correct);
}

// The tiles against torch's causal attention in double, each ISA's tiles this CPU runs: sequences
// that end mid-tile (8 or 4 rows; 70 rows end in tiles of 4 and 2) and mid-vector (16 or 8
// columns), heads of 16, 32, 48, 64 and 128 (tiles of 1, 2 and 3 vectors and the heads-of-64
// tiles), one and several heads; q, k, v read from the rows of one qkv buffer [B, T, 3, H, D] and
// y written into [B, T, H, D] rows, as the step does.
TEST(GptKernels, CausalAttentionTilesFollowTorchsAttention) {
    struct Shape {
        std::int64_t batch, heads, seq, head;
    };
    // Every ISA's tiles this CPU runs (AVX-512, AVX2 + FMA, generic): each has its own tile shapes.
    const auto isas = cpu::tileIsas();
    ASSERT_FALSE(isas.empty());
    EXPECT_EQ(isas.back(), cpu::TileIsa::generic);
    for (const auto isa : isas)
        for (const auto s : {Shape{2, 3, 256, 64}, Shape{5, 1, 40, 32}, Shape{1, 4, 40, 32}, Shape{2, 2, 15, 16},
                             Shape{2, 1, 1, 16}, Shape{1, 2, 23, 48}, Shape{1, 1, 33, 128}, Shape{1, 2, 70, 48}}) {
            SCOPED_TRACE(::testing::Message() << cpu::tileIsaName(isa) << ": " << s.batch << " x " << s.heads << " x "
                                              << s.seq << " x " << s.head);
            auto gen = at::detail::createCPUGenerator(5);
            const auto width = s.heads * s.head;
            const auto qkv = torch::randn({s.batch, s.seq, 3, s.heads, s.head}, gen, torch::kFloat);
            const auto dy = torch::randn({s.batch, s.seq, s.heads, s.head}, gen, torch::kFloat);
            const float scale = 1.0f / std::sqrt(static_cast<float>(s.head));
            auto p = torch::full({s.batch * s.heads * s.seq * cpu::attentionRowStride(s.seq)}, NAN);
            auto y = torch::full_like(dy, NAN);
            auto dqkv = torch::full_like(qkv, NAN);
            const cpu::AttentionShape shape{s.batch, s.heads, s.seq, s.head, 3 * width, width};
            const float* in = qkv.data_ptr<float>();
            float* din = dqkv.data_ptr<float>();
            cpu::causalAttentionForward(shape, in, in + width, in + 2 * width, scale, p.data_ptr<float>(),
                                        y.data_ptr<float>(), isa);
            cpu::causalAttentionBackward(shape, in, in + width, in + 2 * width, p.data_ptr<float>(),
                                         dy.data_ptr<float>(), scale, din, din + width, din + 2 * width, isa);
            // Torch's layout: [B, H, T, D].
            auto heads = [](const torch::Tensor& t) { return t.permute({0, 2, 1, 3}); };
            auto part = [&](const torch::Tensor& t, int i) { return heads(t.select(2, i)).to(torch::kDouble); };
            auto qd = part(qkv, 0).requires_grad_(), kd = part(qkv, 1).requires_grad_(),
                 vd = part(qkv, 2).requires_grad_();
            const auto ref = at::scaled_dot_product_attention(qd, kd, vd, {}, 0.0, /*is_causal=*/true);
            ref.backward(heads(dy).to(torch::kDouble));
            for (const auto& [name, ours, theirs] :
                 {std::tuple{"y", heads(y), ref.detach()}, std::tuple{"dq", part(dqkv, 0), qd.grad()},
                  std::tuple{"dk", part(dqkv, 1), kd.grad()}, std::tuple{"dv", part(dqkv, 2), vd.grad()}}) {
                const double worst = (ours.to(torch::kDouble) - theirs).abs().max().item<double>();
                EXPECT_LT(worst, 1e-5 * std::max(1.0, theirs.abs().max().item<double>())) << name;
            }
            // Each row's probabilities on and below the diagonal: the causal softmax.
            const auto rows = p.view({s.batch * s.heads, s.seq, cpu::attentionRowStride(s.seq)});
            const auto q = part(qkv, 0).to(torch::kFloat).reshape({-1, s.seq, s.head});
            const auto k = part(qkv, 1).to(torch::kFloat).reshape({-1, s.seq, s.head});
            const auto logits = torch::matmul(q, k.transpose(1, 2)) * scale;
            const auto mask = torch::ones({s.seq, s.seq}, torch::kBool).tril();
            const auto expected = torch::softmax(logits.masked_fill(~mask, -INFINITY), -1);
            EXPECT_TRUE(torch::allclose(torch::where(mask, rows.narrow(2, 0, s.seq), 0.0f), expected, 1e-5, 1e-6));
        }
    const cpu::AttentionShape oddHeads{1, 1, 8, 24, 24, 24}, narrowRows{1, 2, 8, 16, 16, 32};
    EXPECT_THROW(cpu::causalAttentionForward(oddHeads, nullptr, nullptr, nullptr, 1.0f, nullptr, nullptr),
                 std::invalid_argument);
    EXPECT_THROW(cpu::causalAttentionForward(narrowRows, nullptr, nullptr, nullptr, 1.0f, nullptr, nullptr),
                 std::invalid_argument);
    // An ISA this CPU lacks is a clear error, not an illegal instruction.
    for (const auto isa : {cpu::TileIsa::avx512, cpu::TileIsa::avx2}) {
        if (std::find(isas.begin(), isas.end(), isa) == isas.end()) {
            const cpu::AttentionShape one{1, 1, 16, 16, 16, 16};
            std::vector<float> buf(16 * 16, 0.0f), probs(16 * 16);
            EXPECT_THROW(cpu::causalAttentionForward(one, buf.data(), buf.data(), buf.data(), 1.0f, probs.data(),
                                                     buf.data(), isa),
                         std::invalid_argument);
        }
    }
}

TEST(GptStep, Bf16GradientsFollowFp32Autograd) {
    if (!cpu::haveMklBf16Gemm()) {
        GTEST_SKIP() << "this LibTorch exports no MKL bf16 GEMM";
    }
    setenv("DEVICERACE_BF16_ROUTE", "mkl", 1); // any CPU: MKL runs it without bf16 units too
    for (const char* route : {"tiles", "bmm"}) {
        SCOPED_TRACE(route);
        AttentionRoute forced(route);
        compareSteps(kContext, true);
    }
    unsetenv("DEVICERACE_BF16_ROUTE");
}

// The fp32 route reads each bf16 operand widened once a step (an activation again in the
// backward, a weight in the input gradient, a layer's output gradient in both its GEMMs): over
// steps whose weights change between them, its gradients are those of a route that reads the bf16
// operands themselves (MKL's bf16 GEMM, fp32 sums: only the order of the sums differs). A copy
// kept from an earlier step's weights, or from another block's gradient in the shared scratch
// buffers, would part them.
TEST(GptStep, TheFp32RoutesWidenedOperandsAreEachStepsOwn) {
    if (!cpu::haveMklBf16Gemm()) {
        GTEST_SKIP() << "this LibTorch exports no MKL bf16 GEMM";
    }
    auto netA = charGpt(), netB = charGpt();
    auto widenedStep = bf16StepWith(*netA, {{"DEVICERACE_BF16_ROUTE", "fp32"}});
    auto directStep = bf16StepWith(*netB, {{"DEVICERACE_BF16_ROUTE", "mkl"}});
    auto &widened = *widenedStep, &direct = *directStep;
    const auto data = tokens(3, kContext);
    const auto x = data.narrow(1, 0, kContext), y = data.narrow(1, 1, kContext);
    auto gen = at::detail::createCPUGenerator(5);
    for (int s = 0; s < 3; ++s) {
        SCOPED_TRACE(s);
        if (s > 0) {
            shiftWeights(gen, {&widened, &direct});
        }
        const auto a = fusedStep(widened, x, y, netA->gen);
        const auto b = fusedStep(direct, x, y, netB->gen);
        EXPECT_NEAR(a.loss, b.loss, 1e-3 * b.loss);
        const auto ga = widened.flat().grads, gb = direct.flat().grads;
        const double cosine = (ga * gb).sum().item<double>() / (ga.norm().item<double>() * gb.norm().item<double>());
        EXPECT_GT(cosine, 0.9999);
    }
}

// Where every GEMM of a bf16 step runs in fp32, the step keeps its GEMM inputs as bf16 values in
// fp32 storage from its second step on: the loops round as they write, and the GEMMs read what
// they would have widened. Against a step that writes bf16 and widens it (DEVICERACE_BF16_IN_F32=0),
// every loss and gradient is the same to the bit, over steps with new weights and a smaller last
// batch, with either attention. A value rounded other than to nearest even, or a scratch buffer
// left bf16, would part them.
TEST(GptStep, Bf16InputsKeptInFp32StorageGiveTheWidenedStepsValues) {
    for (const char* route : {"tiles", "bmm"}) {
        SCOPED_TRACE(route);
        AttentionRoute forced(route);
        auto netA = charGpt(), netB = charGpt();
        auto keptStep = bf16StepWith(*netA, {{"DEVICERACE_BF16_ROUTE", "fp32"}});
        auto widenedStep = bf16StepWith(*netB, {{"DEVICERACE_BF16_ROUTE", "fp32"}, {"DEVICERACE_BF16_IN_F32", "0"}});
        auto &kept = *keptStep, &widened = *widenedStep;
        const auto data = tokens(3, kContext);
        auto gen = at::detail::createCPUGenerator(7);
        for (int s = 0; s < 4; ++s) {
            SCOPED_TRACE(s);
            if (s > 0) {
                shiftWeights(gen, {&kept, &widened});
            }
            const auto rows = s == 3 ? 2 : 3;
            const auto x = data.narrow(0, 0, rows).narrow(1, 0, kContext);
            const auto y = data.narrow(0, 0, rows).narrow(1, 1, kContext);
            const auto a = fusedStep(kept, x, y, netA->gen);
            const auto b = fusedStep(widened, x, y, netB->gen);
            EXPECT_EQ(a.loss, b.loss);
            EXPECT_EQ(a.correct, b.correct);
            EXPECT_TRUE(torch::equal(kept.flat().grads, widened.flat().grads))
                << (kept.flat().grads - widened.flat().grads).abs().max().item<double>();
        }
        EXPECT_NE(kept.describe().find("their bf16 inputs kept in fp32 storage"), std::string::npos) << kept.describe();
        EXPECT_EQ(widened.describe().find("kept in fp32 storage"), std::string::npos) << widened.describe();
    }
}

// A bf16 step with any GEMM on a bf16 route keeps its inputs bf16.
TEST(GptStep, ABf16RouteKeepsTheInputsBf16) {
    if (!cpu::haveMklBf16Gemm()) {
        GTEST_SKIP() << "this LibTorch exports no MKL bf16 GEMM";
    }
    auto net = charGpt();
    setenv("DEVICERACE_BF16_ROUTE", "mkl", 1);
    GptStep step(*net, 2, kContext, true);
    unsetenv("DEVICERACE_BF16_ROUTE");
    const auto data = tokens(2, kContext);
    for (int s = 0; s < 2; ++s) {
        fusedStep(step, data.narrow(1, 0, kContext), data.narrow(1, 1, kContext), net->gen);
    }
    EXPECT_EQ(step.describe().find("kept in fp32 storage"), std::string::npos) << step.describe();
}

TEST(GptStep, TheParametersStayTheModulesAndTheMatricesComeFirst) {
    auto net = charGpt();
    std::vector<torch::Tensor> before;
    for (const auto& p : net->parameters()) {
        before.push_back(p.detach().clone());
    }
    GptStep step(*net, 2, kContext, false);
    std::int64_t matrices = 0;
    std::size_t i = 0;
    for (const auto& p : net->parameters()) {
        EXPECT_TRUE(torch::equal(p, before[i++])); // same values, now in the flat buffer
        const auto offset = p.data_ptr<float>() - step.flat().params.data_ptr<float>();
        ASSERT_GE(offset, 0);
        ASSERT_LE(offset + p.numel(), step.flat().params.numel());
        if (p.dim() >= 2) {
            matrices += p.numel();
            EXPECT_LT(offset, step.decayedCount());
        } else {
            EXPECT_GE(offset, step.decayedCount());
        }
    }
    EXPECT_EQ(matrices, step.decayedCount());
}

TEST(GptStep, ATokenOutsideTheVocabularyIsAClearError) {
    auto net = charGpt();
    GptStep step(*net, 2, kContext, false);
    auto data = tokens(2, kContext);
    data[1][5] = kVocabulary + 3;
    try {
        fusedStep(step, data.narrow(1, 0, kContext), data.narrow(1, 1, kContext), net->gen);
        ADD_FAILURE() << "a token outside the vocabulary was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("outside the network's vocabulary of 65"), std::string::npos) << e.what();
    }
}

TEST(GptStep, SaysWhyItDoesNotTakeALane) {
    auto net = charGpt();
    const c10::Device cpu(c10::kCPU);
    EXPECT_FALSE(GptStep::whyNot(*net, Task::LanguageModel, cpu, Precision::Fp32, false, true, 12, kContext));
    EXPECT_EQ(GptStep::whyNot(*net, Task::LanguageModel, cpu, Precision::Fp32, false, false, 12, kContext),
              "fused=false");
    EXPECT_EQ(GptStep::whyNot(*net, Task::LanguageModel, cpu, Precision::Fp16, false, true, 12, kContext), "fp16");
    EXPECT_EQ(GptStep::whyNot(*net, Task::LanguageModel, cpu, Precision::Fp32, true, true, 12, kContext),
              "a data-parallel rank");
    EXPECT_EQ(GptStep::whyNot(*net, Task::LanguageModel, c10::Device(c10::kCUDA, 0), Precision::Fp32, false, true, 12,
                              kContext),
              "not a CPU lane");
    auto big = charGpt("char-gpt-6l");
    EXPECT_FALSE(GptStep::whyNot(*big, Task::LanguageModel, cpu, Precision::Fp32, false, true, 64, 256));
    EXPECT_EQ(GptStep::whyNot(*big, Task::LanguageModel, cpu, Precision::Fp32, false, true, 512, 256),
              "its attention weights would take 4608 MB");
    auto mlp = workloadImpl("fashion-mlp").makeModel(at::detail::createCPUGenerator(1), {});
    EXPECT_EQ(GptStep::whyNot(*mlp, Task::LanguageModel, cpu, Precision::Fp32, false, true, 12, kContext), "not a GPT");
}

TEST(GptKernels, GeluFollowsTheExactErfForm) {
    double worstValue = 0, worstSlope = 0;
    for (int i = -20000; i <= 20000; ++i) {
        const double x = i / 500.0; // [-40, 40]: past |x| = 13.19, where the normal's z is bounded
        const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
        const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
        const double bound = std::max(1.0, std::abs(x));
        worstValue = std::max(worstValue, std::abs(cpu::geluValue(static_cast<float>(x)) - x * cdf) / bound);
        worstSlope = std::max(worstSlope, std::abs(cpu::geluSlope(static_cast<float>(x)) - (cdf + x * pdf)) / bound);
    }
    EXPECT_LT(worstValue, 1e-6);
    EXPECT_LT(worstSlope, 1e-6);
}

// The layer norm loops (per-ISA clones of explicit 8-float vectors, then a tail one by one) against
// torch's layer_norm and its gradient in double: widths with every tail (1, 7, 13, 203) and
// char-gpt's 128; float and bf16 outputs; the backward adds to dx.
TEST(GptKernels, LayerNormLoopsFollowTorchsLayerNorm) {
    for (std::int64_t cols : {1, 7, 8, 13, 16, 128, 203}) {
        SCOPED_TRACE("cols " + std::to_string(cols));
        constexpr std::int64_t rows = 6;
        torch::manual_seed(cols);
        const auto x = torch::randn({rows, cols}) * 3 + 0.5;
        const auto gamma = torch::randn({cols}), beta = torch::randn({cols}), dy = torch::randn({rows, cols});
        const auto start = torch::randn({rows, cols}); // dx is added to
        auto xd = x.to(torch::kDouble).requires_grad_(), gd = gamma.to(torch::kDouble).requires_grad_();
        const auto ref = torch::layer_norm(xd, {cols}, gd, beta.to(torch::kDouble), 1e-5);
        ref.backward(dy.to(torch::kDouble));
        auto out = torch::empty({rows, cols}), mean = torch::empty({rows}), rstd = torch::empty({rows});
        auto outB = torch::empty({rows, cols}, torch::kBFloat16);
        cpu::layerNormRows(x.data_ptr<float>(), rows, cols, gamma.data_ptr<float>(), beta.data_ptr<float>(),
                           out.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>());
        cpu::layerNormRows(x.data_ptr<float>(), rows, cols, gamma.data_ptr<float>(), beta.data_ptr<float>(),
                           reinterpret_cast<cpu::Bf16*>(outB.data_ptr<at::BFloat16>()), mean.data_ptr<float>(),
                           rstd.data_ptr<float>());
        auto dx = start.clone();
        cpu::layerNormBackwardRows(dy.data_ptr<float>(), x.data_ptr<float>(), mean.data_ptr<float>(),
                                   rstd.data_ptr<float>(), gamma.data_ptr<float>(), rows, cols, dx.data_ptr<float>());
        const double scale = ref.abs().max().item<double>() + 1;
        EXPECT_LT((out.to(torch::kDouble) - ref).abs().max().item<double>(), 1e-5 * scale);
        EXPECT_LT((outB.to(torch::kDouble) - ref).abs().max().item<double>(), scale / 128); // 8 bits of mantissa
        EXPECT_LT((mean.to(torch::kDouble) - x.to(torch::kDouble).mean(1)).abs().max().item<double>(), 1e-5);
        const auto dxRef = start.to(torch::kDouble) + xd.grad();
        EXPECT_LT((dx.to(torch::kDouble) - dxRef).abs().max().item<double>(),
                  1e-4 * (dxRef.abs().max().item<double>() + 1));
    }
}

// The loop the step runs (per-ISA clones, vector bodies and tails), not just the scalar helpers:
// GELU out, its slope left in x, for float and bf16 outputs, 203 columns (tails of 8, 16 and 64).
// Every loop that writes a GEMM's bf16 input writes the same values in fp32 storage
// (cpu::Bf16InF32) as it writes in bf16, widened: whole vectors and tails, a NaN and values that
// round up and to even included.
TEST(GptKernels, Bf16InF32OutputsAreTheBf16OutputsWidened) {
    auto b16 = [](const torch::Tensor& t) { return reinterpret_cast<cpu::Bf16*>(t.data_ptr<at::BFloat16>()); };
    auto w32 = [](const torch::Tensor& t) { return reinterpret_cast<cpu::Bf16InF32*>(t.data_ptr<float>()); };
    auto same = [](const torch::Tensor& bf16, const torch::Tensor& inF32) {
        // bit for bit, NaN included: compare the widened bits
        return torch::equal(bf16.to(torch::kFloat).view(torch::kInt), inF32.view(torch::kInt));
    };
    for (std::int64_t cols : {1, 7, 8, 13, 16, 203, 512}) {
        SCOPED_TRACE("cols " + std::to_string(cols));
        constexpr std::int64_t rows = 5;
        torch::manual_seed(cols);
        auto x = torch::randn({rows, cols}) * 3;
        x.view(-1)[0] = 1.0f + 0x8000 * std::ldexp(1.0f, -23);                // a tie: rounds to even (down)
        x.view(-1)[rows * cols - 1] = 1.0f + 0x18000 * std::ldexp(1.0f, -23); // a tie: rounds up
        const auto gamma = torch::randn({cols}), beta = torch::randn({cols}), bias = torch::randn({cols});
        auto mean = torch::empty({rows}), rstd = torch::empty({rows});
        auto outB = torch::empty({rows, cols}, torch::kBFloat16), outW = torch::empty({rows, cols});
        cpu::layerNormRows(x.data_ptr<float>(), rows, cols, gamma.data_ptr<float>(), beta.data_ptr<float>(), b16(outB),
                           mean.data_ptr<float>(), rstd.data_ptr<float>());
        cpu::layerNormRows(x.data_ptr<float>(), rows, cols, gamma.data_ptr<float>(), beta.data_ptr<float>(), w32(outW),
                           mean.data_ptr<float>(), rstd.data_ptr<float>());
        EXPECT_TRUE(same(outB, outW)) << "layer norm";
        auto xB = x.clone(), xW = x.clone();
        cpu::biasGelu(xB.data_ptr<float>(), bias.data_ptr<float>(), rows, cols, b16(outB));
        cpu::biasGelu(xW.data_ptr<float>(), bias.data_ptr<float>(), rows, cols, w32(outW));
        EXPECT_TRUE(same(outB, outW)) << "bias + GELU";
        EXPECT_TRUE(torch::equal(xB, xW)) << "GELU's slope";
        x.view(-1)[1] = NAN;
        auto sumsB = torch::empty({cols}), sumsW = torch::empty({cols});
        cpu::columnSums(x.data_ptr<float>(), rows, cols, sumsB.data_ptr<float>(), b16(outB));
        cpu::columnSums(x.data_ptr<float>(), rows, cols, sumsW.data_ptr<float>(), w32(outW));
        EXPECT_TRUE(same(outB, outW)) << "column sums' copy";
        EXPECT_TRUE(torch::equal(sumsB.nan_to_num(), sumsW.nan_to_num())) << "column sums";
        cpu::toBf16(x.data_ptr<float>(), b16(outB), rows * cols);
        cpu::roundToBf16(x.data_ptr<float>(), w32(outW), rows * cols);
        EXPECT_TRUE(same(outB, outW)) << "rounding";
        EXPECT_TRUE(std::isnan(outW.view(-1)[1].item<float>()));
        EXPECT_EQ(outW.view(-1)[0].item<float>(), 1.0f);
        EXPECT_EQ(outW.view(-1)[rows * cols - 1].item<float>(), 1.0f + std::ldexp(1.0f, -6));
    }
    // The heads merged back into rows: 2 sequences of 3 tokens, 2 heads of 5.
    const auto heads = torch::randn({2 * 2 * 3 * 5});
    auto mergedB = torch::empty({6, 10}, torch::kBFloat16), mergedW = torch::empty({6, 10});
    cpu::mergeHeads(heads.data_ptr<float>(), 2, 3, 2, 5, b16(mergedB), 10);
    cpu::mergeHeads(heads.data_ptr<float>(), 2, 3, 2, 5, w32(mergedW), 10);
    EXPECT_TRUE(same(mergedB, mergedW)) << "merged heads";
}

TEST(GptKernels, BiasGeluLoopWritesGeluAndKeepsItsSlope) {
    constexpr std::int64_t rows = 5, cols = 203;
    std::vector<float> bias(cols), in(rows * cols);
    for (std::int64_t c = 0; c < cols; ++c) {
        bias[c] = 0.01f * static_cast<float>(c % 7 - 3);
    }
    for (std::int64_t i = 0; i < rows * cols; ++i) {
        in[i] = -8.0f + 16.0f * static_cast<float>(i) / static_cast<float>(rows * cols - 1);
    }
    for (bool bf16 : {false, true}) {
        SCOPED_TRACE(bf16 ? "bf16 out" : "float out");
        auto x = in;
        std::vector<float> out(rows * cols);
        std::vector<cpu::Bf16> outB(rows * cols);
        if (bf16) {
            cpu::biasGelu(x.data(), bias.data(), rows, cols, outB.data());
        } else {
            cpu::biasGelu(x.data(), bias.data(), rows, cols, out.data());
        }
        double worstValue = 0, worstSlope = 0;
        for (std::int64_t i = 0; i < rows * cols; ++i) {
            const double v = static_cast<double>(in[i]) + bias[i % cols];
            const double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
            const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
            float got = out[i];
            if (bf16) {
                const std::uint32_t bits = static_cast<std::uint32_t>(outB[i].bits) << 16;
                std::memcpy(&got, &bits, sizeof got);
            }
            const double bound = std::max(1.0, std::abs(v));
            worstValue = std::max(worstValue, std::abs(got - v * cdf) / bound);
            worstSlope = std::max(worstSlope, std::abs(x[i] - (cdf + v * pdf)) / bound);
        }
        EXPECT_LT(worstValue, bf16 ? 1.0 / 128 : 1e-6); // bf16: 8 bits of mantissa
        EXPECT_LT(worstSlope, 1e-6);
    }
}
