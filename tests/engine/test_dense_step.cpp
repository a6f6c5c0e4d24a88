// The fused dense step (engine train/fused/dense_step.h) trains what autograd trains: with one seed,
// fashion-mlp with fused=true follows the per-step loss curve of fused=false (autograd and
// torch::optim) over 100 steps, dropout on (both draw the same hashed masks), in fp32 and in
// bf16, on bytes read from IDX files like the real data, across partial batches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>

#include "devicerace/dataset.h"
#include "devicerace/lane.h"
#include "kernels/bf16_routes.h"
#include "kernels/mkl_gemm.h"
#include "lane_runs.h"
#include "test_util.h"

using namespace devicerace;
namespace cpu = devicerace::detail::cpu;

namespace {

constexpr std::int64_t kSteps = 100;

// At lr 2e-4 (the workload's is 1e-3): at 1e-3 on this noisy task RMSprop turns rounding
// differences into different courses within 50 steps, even fp32 against fp32.
// Fashion-MNIST-shaped bytes that are learnable but noisy (the loss stays well above 0 for 100
// steps): a class lights a band of rows, under uniform noise.
std::shared_ptr<const Dataset> noisyImages(const test::TempDir& dir, std::uint32_t train, std::uint32_t test = 200) {
    std::mt19937 rng(11);
    auto write = [&](const std::string& prefix, std::uint32_t n) {
        std::vector<std::uint8_t> px(static_cast<std::size_t>(n) * 784), lb(n);
        for (std::uint32_t i = 0; i < n; ++i) {
            lb[i] = static_cast<std::uint8_t>(rng() % 10);
            for (int r = 0; r < 28; ++r) {
                for (int c = 0; c < 28; ++c) {
                    const int band = r / 3 == lb[i] ? 60 : 0;
                    px[i * 784 + r * 28 + c] = static_cast<std::uint8_t>(band + rng() % 190);
                }
            }
        }
        test::writeGzip(dir / (prefix + "-images-idx3-ubyte.gz"), test::idxBytes({n, 28, 28}, px));
        test::writeGzip(dir / (prefix + "-labels-idx1-ubyte.gz"), test::idxBytes({n}, lb));
    };
    write("train", train);
    write("t10k", test);
    return loadFashionMnist(dir.path());
}

struct Curve {
    std::vector<double> losses;
    std::string execution;
};

Curve curve(const std::string& spec, std::shared_ptr<const Dataset> data) {
    const auto masks = test::sameDropoutMasks(); // fused=false lanes drop what the fused step drops
    auto run = test::runEveryStep("fashion-mlp", parseLaneSpec(spec), std::move(data), kSteps, 5);
    EXPECT_EQ(run.summary.state, LaneState::Finished) << spec << ": " << run.summary.error;
    return {run.losses, run.summary.execution};
}

void expectSameCurve(const Curve& a, const Curve& b, double tolerance) {
    ASSERT_EQ(a.losses.size(), static_cast<std::size_t>(kSteps));
    ASSERT_EQ(b.losses.size(), a.losses.size());
    // Training must move the loss, or equal curves would prove nothing.
    EXPECT_LT(a.losses.back(), 0.8 * a.losses.front());
    double worst = 0;
    for (std::size_t i = 0; i < a.losses.size(); ++i) {
        const double diff = std::abs(a.losses[i] - b.losses[i]) / std::max(1.0, std::abs(a.losses[i]));
        worst = std::max(worst, diff);
        EXPECT_LE(diff, tolerance) << "step " << i + 1 << ": " << a.losses[i] << " vs " << b.losses[i];
    }
    std::printf("worst relative difference over %lld steps: %.2e\n", static_cast<long long>(kSteps), worst);
}

// bf16: rounding in different places makes single steps differ by several percent (RMSprop
// divides by the gradient's running size, so tiny gradients flip sign), but the training
// follows the same course: the means of 10-step windows agree.
void expectSameCourse(const Curve& a, const Curve& b, double tolerance) {
    ASSERT_EQ(a.losses.size(), static_cast<std::size_t>(kSteps));
    ASSERT_EQ(b.losses.size(), a.losses.size());
    EXPECT_LT(a.losses.back(), 0.8 * a.losses.front());
    for (std::size_t w = 0; w < a.losses.size(); w += 10) {
        const double ma = test::windowMean(a.losses, w), mb = test::windowMean(b.losses, w);
        EXPECT_LE(std::abs(ma - mb) / ma, tolerance)
            << "steps " << w + 1 << "-" << w + 10 << ": " << ma << " vs " << mb;
    }
}

} // namespace

// 1,000 examples at batch 48: every epoch ends on a batch of 40 rows.
TEST(DenseStep, Fp32FollowsTheAutogradLossCurve) {
    test::TempDir dir;
    auto data = noisyImages(dir, 1000);
    const auto autograd = curve("cpu,threads=1,batch=48,lr=2e-4,fused=false", data);
    const auto fused = curve("cpu,threads=1,batch=48,lr=2e-4", data);
    EXPECT_NE(autograd.execution.find("autograd step (fused=false)"), std::string::npos) << autograd.execution;
    EXPECT_NE(autograd.execution.find("torch::optim RMSprop"), std::string::npos) << autograd.execution;
    EXPECT_NE(fused.execution.find("fused dense step, one-pass RMSprop"), std::string::npos) << fused.execution;
    expectSameCurve(autograd, fused, 1e-3);
}

TEST(DenseStep, Bf16FollowsTheAutocastLossCurve) {
    test::TempDir dir;
    auto data = noisyImages(dir, 1000);
    const auto autocast = curve("cpu,threads=1,batch=48,lr=2e-4,precision=bf16,fused=false", data);
    const auto fused = curve("cpu,threads=1,batch=48,lr=2e-4,precision=bf16", data);
    const auto fp32 = curve("cpu,threads=1,batch=48,lr=2e-4", data);
    EXPECT_NE(autocast.execution.find("bf16 autocast"), std::string::npos) << autocast.execution;
    EXPECT_NE(fused.execution.find("fused dense step (bf16 GEMMs"), std::string::npos) << fused.execution;
    EXPECT_NE(fused.execution.find("fp32 master weights)"), std::string::npos) << fused.execution;
    EXPECT_EQ(fused.execution.find("autocast"), std::string::npos) << fused.execution;
    // The two bf16 paths round in different places (autocast rounds before the bias add, the
    // fused step adds the bias in fp32); both follow fp32's course.
    expectSameCourse(autocast, fused, 0.05);
    expectSameCourse(fp32, fused, 0.05);
    expectSameCourse(fp32, autocast, 0.05);
}

// The step alone (optimizer fused either way), as the benchmarks isolate it.
TEST(DenseStep, TheEnvironmentSwitchKeepsTheOptimizerFused) {
    test::TempDir dir;
    auto data = noisyImages(dir, 600);
    ASSERT_EQ(setenv("DEVICERACE_DENSE_STEP", "0", 1), 0);
    const auto off = curve("cpu,threads=1,batch=48,lr=2e-4", data);
    unsetenv("DEVICERACE_DENSE_STEP");
    const auto on = curve("cpu,threads=1,batch=48,lr=2e-4", data);
    EXPECT_NE(off.execution.find("autograd step (DEVICERACE_DENSE_STEP=0), one-pass RMSprop"), std::string::npos)
        << off.execution;
    expectSameCurve(off, on, 1e-3);
}

// Two threads split each step's batch rows (forward, loss, input gradients), then its units
// (weight and bias gradients, RMSprop): the same curve as one thread. The bias gradients and
// the loss are sums of fixed blocks of rows added in block order, and dropout drops the same
// units, and each worker's GEMMs run on its own thread (kernels/mkl_gemm.h SerialMkl), so only the
// GEMMs' rounding of a product of other sizes could differ.
TEST(DenseStep, TwoThreadsFollowOneThread) {
    test::TempDir dir;
    auto data = noisyImages(dir, 600);
    const auto one = curve("cpu,threads=1,batch=48,lr=2e-4", data);
    const auto two = curve("cpu,threads=2,batch=48,lr=2e-4", data);
    EXPECT_EQ(one.execution.find("split over"), std::string::npos) << one.execution;
    EXPECT_NE(two.execution.find("fused dense step, one-pass RMSprop, each step's batch rows, then its units, split "
                                 "over 2 threads"),
              std::string::npos)
        << two.execution;
    expectSameCurve(one, two, 1e-2);
    // A batch of 20 rows is too small to split: the step runs whole, its GEMMs on two threads.
    expectSameCurve(curve("cpu,threads=1,batch=20,lr=2e-4", data), curve("cpu,threads=2,batch=20,lr=2e-4", data), 1e-2);
}

// The shares of the rows and units follow each thread's measured speed (kernels/share_balancer.h):
// whatever the shares, the course is the same. Fixed uneven shares (DEVICERACE_DENSE_BALANCE=f:
// worker 0 takes f of the rows and of every layer's units) against even ones and the balanced
// default.
TEST(DenseStep, TheThreadsSharesDoNotChangeTheCourse) {
    test::TempDir dir;
    auto data = noisyImages(dir, 600);
    const auto balanced = curve("cpu,threads=2,batch=48,lr=2e-4", data);
    bool sameBits = true;
    for (const char* share : {"0", "0.3", "0.7"}) {
        ASSERT_EQ(setenv("DEVICERACE_DENSE_BALANCE", share, 1), 0);
        const auto fixed = curve("cpu,threads=2,batch=48,lr=2e-4", data);
        unsetenv("DEVICERACE_DENSE_BALANCE");
        SCOPED_TRACE(std::string("worker 0's share ") + share);
        expectSameCurve(balanced, fixed, 1e-2);
        sameBits = sameBits && fixed.losses == balanced.losses;
    }
    std::printf("the same bits whatever the shares: %s\n", sameBits ? "yes" : "no (the GEMMs' rounding)");
}

TEST(DenseStep, TwoThreadsFollowOneThreadInBf16) {
    test::TempDir dir;
    auto data = noisyImages(dir, 600);
    expectSameCourse(curve("cpu,threads=1,batch=48,lr=2e-4,precision=bf16", data),
                     curve("cpu,threads=2,batch=48,lr=2e-4,precision=bf16", data), 0.05);
}

// Where fp32 is every GEMM's route, the step keeps its activations and gradients as bf16 values
// in fp32 storage, and its GEMMs read them as they are: against the step that writes bf16 and
// widens it at each GEMM (DEVICERACE_BF16_IN_F32=0), the same losses to the bit, on one and two
// threads; a value rounded other than the bf16 copy's would part them. A lane with a bf16 route
// for most of its arithmetic keeps bf16 storage.
TEST(DenseStep, Bf16ValuesKeptInFp32StorageGiveTheWidenedStepsLosses) {
    test::TempDir dir;
    auto data = noisyImages(dir, 600);
    ASSERT_EQ(setenv("DEVICERACE_BF16_ROUTE", "fp32", 1), 0);
    for (const char* threads : {"1", "2"}) {
        SCOPED_TRACE(threads);
        const auto spec = std::string("cpu,threads=") + threads + ",batch=48,lr=2e-4,precision=bf16";
        const auto kept = curve(spec, data);
        ASSERT_EQ(setenv("DEVICERACE_BF16_IN_F32", "0", 1), 0);
        const auto widened = curve(spec, data);
        unsetenv("DEVICERACE_BF16_IN_F32");
        ASSERT_EQ(kept.losses.size(), static_cast<std::size_t>(kSteps));
        EXPECT_EQ(kept.losses, widened.losses);
        EXPECT_LT(kept.losses.back(), 0.8 * kept.losses.front());
        EXPECT_NE(kept.execution.find("fp32 for every GEMM, on bf16 values kept in fp32 storage"), std::string::npos)
            << kept.execution;
        EXPECT_EQ(widened.execution.find("kept in fp32 storage"), std::string::npos) << widened.execution;
    }
    if (cpu::haveMklBf16Gemm()) {
        ASSERT_EQ(setenv("DEVICERACE_BF16_ROUTE", "mkl", 1), 0);
        const auto mkl = curve("cpu,threads=1,batch=48,lr=2e-4,precision=bf16", data);
        EXPECT_EQ(mkl.execution.find("kept in fp32 storage"), std::string::npos) << mkl.execution;
    }
    unsetenv("DEVICERACE_BF16_ROUTE");
}

// Every bf16 GEMM route, forced for every shape (DEVICERACE_BF16_ROUTE): MKL's bf16 GEMM where
// this LibTorch has it, oneDNN's through at::mm (rounded to bf16, then widened), the engine's
// AVX-512 BF16 kernel where the CPU has it, and fp32 on widened inputs. Each follows fp32's
// course, on one and two threads, and the lane names it.
TEST(DenseStep, EveryBf16GemmRouteFollowsFp32) {
    test::TempDir dir;
    auto data = noisyImages(dir, 600);
    const auto fp32 = curve("cpu,threads=1,batch=48,lr=2e-4", data);
    std::map<cpu::Bf16Route, Curve> oneThread;
    for (const auto route : cpu::availableBf16Routes()) {
        SCOPED_TRACE(cpu::bf16RouteName(route));
        ASSERT_EQ(setenv("DEVICERACE_BF16_ROUTE", cpu::bf16RouteKey(route), 1), 0);
        const auto one = curve("cpu,threads=1,batch=48,lr=2e-4,precision=bf16", data);
        const auto two = curve("cpu,threads=2,batch=48,lr=2e-4,precision=bf16", data);
        unsetenv("DEVICERACE_BF16_ROUTE");
        const auto named = std::string(cpu::bf16RouteName(route)) + " for every GEMM";
        EXPECT_NE(one.execution.find(named), std::string::npos) << one.execution;
        EXPECT_NE(two.execution.find(named), std::string::npos) << two.execution;
        expectSameCourse(fp32, one, 0.05);
        expectSameCourse(one, two, 0.05);
        oneThread[route] = one;
    }
    // The fp32 route (the bf16 operands widened) and MKL's bf16 GEMM multiply the same bf16 values
    // with fp32 sums: step by step the same losses, but for the order of the sums and the roundings
    // it moves (a weight widened from an earlier step's mirror parted them by 2% at the second step).
    if (oneThread.count(cpu::Bf16Route::Mkl)) {
        const auto& a = oneThread[cpu::Bf16Route::Fp32].losses;
        const auto& b = oneThread[cpu::Bf16Route::Mkl].losses;
        ASSERT_GE(a.size(), 10u);
        ASSERT_EQ(a.size(), b.size());
        for (std::size_t i = 0; i < 10; ++i) {
            EXPECT_LE(std::abs(a[i] - b[i]) / b[i], 2e-3) << "step " << i + 1 << ": " << a[i] << " vs " << b[i];
        }
    }
}

// A bf16 lane of the fused dense step evaluates through the module, whose dense layers take their
// GEMM shapes' routes as an autograd lane's do: autocast's oneDNN bf16 linear is an emulation on a
// CPU without bf16 units (each 10,000-image evaluation of fashion-mlp took 1.5 s there against
// fp32's 0.05). The execution names the evaluation's routes once the first evaluation has chosen
// them, and the validation loss is autocast's, within rounding.
TEST(DenseStep, ABf16LanesEvaluationRoutesItsDenseLayers) {
    test::TempDir dir;
    auto data = noisyImages(dir, 2048, 600); // passes of 600 rows: routed (256 or more)
    const auto [routed, routedLoss] = test::bf16EvalRun("fashion-mlp", data, true);
    const auto [autocast, autocastLoss] = test::bf16EvalRun("fashion-mlp", data, false);
    EXPECT_NE(routed.find("fused dense step ("), std::string::npos) << routed;
    EXPECT_NE(routed.find("evaluation's dense layers' bf16 GEMMs: fp32 for every GEMM (DEVICERACE_BF16_ROUTE)"),
              std::string::npos)
        << routed;
    EXPECT_EQ(autocast.find("dense layers' bf16 GEMMs"), std::string::npos) << autocast;
    ASSERT_GT(routedLoss, 0);
    EXPECT_NEAR(routedLoss, autocastLoss, 0.01 * autocastLoss);
}
