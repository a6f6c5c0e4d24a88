// The fused transformer step (engine train/fused/gpt_step.h) trains what autograd trains: with one
// seed, char-gpt with fused=true follows the per-step loss curve of fused=false (autograd, the
// module's forward and fused AdamW with per-tensor decay and clipping) over 100 steps on a text
// file, in fp32 step by step and in bf16 by its course.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <random>

#include "devicerace/dataset.h"
#include "devicerace/lane.h"
#include "devices/cpu_info.h"
#include "kernels/bf16_routes.h"
#include "lane_runs.h"
#include "test_util.h"

using namespace devicerace;

namespace {

constexpr std::int64_t kSteps = 100;

// ~60 kB of sentences from a small grammar: learnable (the loss falls fast), never one repeat.
std::shared_ptr<const Dataset> sentences(const test::TempDir& dir) {
    const char* subjects[] = {"The cat", "A dog", "My neighbour", "The old king", "Every child", "A small bird"};
    const char* verbs[] = {"sees", "likes", "follows", "draws", "finds", "hears"};
    const char* objects[] = {"the moon.", "a red ball.", "the river.", "her shadow.", "some bread.", "the door."};
    std::mt19937 rng(3);
    std::ofstream out(dir / "corpus.txt");
    for (int i = 0; i < 2500; ++i) {
        out << subjects[rng() % 6] << ' ' << verbs[rng() % 6] << ' ' << objects[rng() % 6] << (i % 4 == 3 ? '\n' : ' ');
    }
    out.close();
    TextWindows windows;
    windows.length = 65; // char-gpt: a context of 64 and the next character
    windows.stride = 7;
    windows.lowercase = false;
    return loadTextCorpus(dir / "corpus.txt", windows, {}, 240);
}

struct Curve {
    std::vector<double> losses;
    std::string execution;
};

Curve curve(const std::string& spec, std::shared_ptr<const Dataset> data, std::int64_t steps = kSteps) {
    auto run = test::runEveryStep("char-gpt", parseLaneSpec(spec), std::move(data), steps, 5);
    EXPECT_EQ(run.summary.state, LaneState::Finished) << spec << ": " << run.summary.error;
    return {run.losses, run.summary.execution};
}

void expectLearning(const Curve& c, std::int64_t steps = kSteps) {
    ASSERT_EQ(c.losses.size(), static_cast<std::size_t>(steps));
    EXPECT_LT(test::windowMean(c.losses, steps - 10), 0.7 * test::windowMean(c.losses, 0)); // it learns
}

// Step by step, within `tolerance` of a's loss (relative).
void expectSameSteps(const Curve& a, const Curve& b, double tolerance) {
    ASSERT_EQ(b.losses.size(), a.losses.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.losses.size(); ++i) {
        const double diff = std::abs(b.losses[i] - a.losses[i]) / a.losses[i];
        worst = std::max(worst, diff);
        EXPECT_LE(diff, tolerance) << "step " << i + 1 << ": " << b.losses[i] << " vs " << a.losses[i];
    }
    std::printf("worst relative difference over %zu steps: %.2e\n", a.losses.size(), worst);
}

} // namespace

TEST(GptStepLanes, Fp32FollowsTheAutogradLossCurve) {
    test::TempDir dir;
    auto data = sentences(dir);
    const auto autograd = curve("cpu,threads=1,fused=false", data);
    const auto fused = curve("cpu,threads=1", data);
    EXPECT_NE(autograd.execution.find("autograd step (fused=false)"), std::string::npos) << autograd.execution;
    EXPECT_NE(fused.execution.find("fused transformer step ("), std::string::npos) << fused.execution;
    EXPECT_NE(fused.execution.find(", fused AdamW"), std::string::npos) << fused.execution;
    expectLearning(autograd);
    expectSameSteps(autograd, fused, 2e-3);
}

// bf16 rounds in other places than autocast (GEMM inputs only; sums, layer norms, softmax and
// GELU in fp32), so steps differ by a little, but the course is fp32's: 10-step means agree.
// A CPU without bf16 units takes the fused step too, its GEMMs on the routes timed there (MKL's
// bf16 GEMM or fp32 on the bf16 values), and the lane says the bf16 is emulated.
TEST(GptStepLanes, Bf16FollowsTheFp32Course) {
    test::TempDir dir;
    auto data = sentences(dir);
    const bool units = !detail::readHostCpu().bf16Units.empty();
    const auto fp32 = curve("cpu,threads=1", data, kSteps);
    const auto bf16 = curve("cpu,threads=1,precision=bf16", data, kSteps);
    expectLearning(bf16, kSteps);
    EXPECT_NE(bf16.execution.find("fused transformer step (bf16 GEMMs with fp32 results: "), std::string::npos)
        << bf16.execution;
    EXPECT_EQ(bf16.execution.find("bf16 emulated") == std::string::npos, units) << bf16.execution;
    ASSERT_EQ(bf16.losses.size(), fp32.losses.size());
    for (std::size_t w = 0; w < fp32.losses.size(); w += 10) {
        const double a = test::windowMean(fp32.losses, w), b = test::windowMean(bf16.losses, w);
        EXPECT_NEAR(b, a, 0.03 * a) << "steps " << w + 1 << "-" << w + 10;
    }
}

// Every bf16 GEMM route a router times here, forced for every shape (DEVICERACE_BF16_ROUTE), trains
// the fused step on fp32's course and is named in the lane's execution (oneDNN's emulation, on a
// CPU without bf16 units, is not timed: ~1 s a step).
TEST(GptStepLanes, EveryBf16GemmRouteFollowsTheFp32Course) {
    test::TempDir dir;
    auto data = sentences(dir);
    constexpr std::int64_t steps = 20;
    const auto fp32 = curve("cpu,threads=1", data, steps);
    for (const auto route : detail::cpu::timedBf16Routes()) {
        SCOPED_TRACE(detail::cpu::bf16RouteName(route));
        ASSERT_EQ(setenv("DEVICERACE_BF16_ROUTE", detail::cpu::bf16RouteKey(route), 1), 0);
        const auto bf16 = curve("cpu,threads=1,precision=bf16", data, steps);
        unsetenv("DEVICERACE_BF16_ROUTE");
        EXPECT_NE(bf16.execution.find(std::string(detail::cpu::bf16RouteName(route)) + " for every GEMM"),
                  std::string::npos)
            << bf16.execution;
        ASSERT_EQ(bf16.losses.size(), fp32.losses.size());
        for (std::size_t w = 0; w < fp32.losses.size(); w += 10) {
            const double a = test::windowMean(fp32.losses, w), b = test::windowMean(bf16.losses, w);
            EXPECT_NEAR(b, a, 0.03 * a) << "steps " << w + 1 << "-" << w + 10;
        }
    }
}

// A fused bf16 lane evaluates through the module, whose dense layers take their GEMM shapes'
// routes as an autograd lane's do (autocast's oneDNN bf16 matmul ran at half the fp32 rate on a
// Xeon without AMX, and evaluating took longer than training): the execution names them once
// the first evaluation has chosen them, and the validation loss is autocast's, within rounding.
TEST(GptStepLanes, ABf16LanesEvaluationRoutesItsDenseLayers) {
    test::TempDir dir;
    auto data = sentences(dir);
    ::setenv("DEVICERACE_FUSED_EVAL", "0", 1); // the module evaluates, not the fused step's forward
    const auto [routed, routedLoss] = test::bf16EvalRun("char-gpt", data, true);
    const auto [autocast, autocastLoss] = test::bf16EvalRun("char-gpt", data, false);
    ::unsetenv("DEVICERACE_FUSED_EVAL");
    EXPECT_NE(routed.find("evaluation's dense layers' bf16 GEMMs: fp32 for every GEMM (DEVICERACE_BF16_ROUTE)"),
              std::string::npos)
        << routed;
    EXPECT_EQ(autocast.find("dense layers' bf16 GEMMs"), std::string::npos) << autocast;
    ASSERT_GT(routedLoss, 0);
    EXPECT_NEAR(routedLoss, autocastLoss, 0.01 * autocastLoss);
}

// Two threads split each step's sequences, one share a thread: the same course as one.
TEST(GptStepLanes, TwoThreadsFollowOneThread) {
    test::TempDir dir;
    auto data = sentences(dir);
    const auto one = curve("cpu,threads=1", data);
    const auto two = curve("cpu,threads=2", data);
    EXPECT_NE(two.execution.find("each step's sequences split over 2 threads"), std::string::npos) << two.execution;
    expectSameSteps(one, two, 2e-3);
}
