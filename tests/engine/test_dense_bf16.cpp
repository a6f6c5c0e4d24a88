// A bf16 lane's dense layer (models.h dense: routedDense) against a float64 reference of its
// bf16 values: on every GEMM route this process can take, on 1 and 2 threads, with and without a
// bias, from a bf16 input (the layer before ran under autocast) and from an fp32 one, the output
// within bf16 rounding of the reference, the input, weight and bias gradients within it too; and
// against autocast's own linear. Outside bf16 autocast, or without the lane's routes, the
// module's forward runs.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernels/bf16_routes.h"
#include "models/models.h"

using namespace devicerace::detail;

namespace {

struct Bf16Autocast {
    Bf16Autocast() {
        at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
        at::autocast::set_autocast_enabled(at::kCPU, true);
    }
    ~Bf16Autocast() {
        at::autocast::set_autocast_enabled(at::kCPU, false);
        at::autocast::clear_cache();
    }
    Bf16Autocast(const Bf16Autocast&) = delete;
    Bf16Autocast& operator=(const Bf16Autocast&) = delete;
};

// DEVICERACE_BF16_ROUTE and a cache folder of the test's own (no timing kept in the user's).
struct RouteScope {
    std::filesystem::path dir = std::filesystem::temp_directory_path() / ("dense-bf16-" + std::to_string(::getpid()));
    explicit RouteScope(const char* route) {
        std::filesystem::create_directories(dir);
        ::setenv("DEVICERACE_CACHE_DIR", dir.c_str(), 1);
        ::setenv("DEVICERACE_BF16_ROUTE", route, 1);
    }
    ~RouteScope() {
        ::unsetenv("DEVICERACE_BF16_ROUTE");
        ::unsetenv("DEVICERACE_CACHE_DIR");
        std::filesystem::remove_all(dir);
    }
    RouteScope(const RouteScope&) = delete;
    RouteScope& operator=(const RouteScope&) = delete;
};

torch::Tensor bf16Values(const torch::Tensor& t) { return t.detach().to(at::kBFloat16).to(at::kDouble); }

// Within bf16 rounding of the reference's scale: a wrong operand, transpose or leading dimension
// lands far outside (the values are O(1) sums of dozens of products).
void expectNear(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
    ASSERT_TRUE(got.defined()) << what;
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    const double scale = want.abs().max().item<double>();
    const double err = (got.to(at::kDouble) - want).abs().max().item<double>();
    EXPECT_LE(err, scale / 64) << what << ": off by " << err << " at scale " << scale;
}

struct Grads {
    torch::Tensor y, dx, dw, db;
};

Grads runDense(torch::nn::Linear& fc, const torch::Tensor& input, const torch::Tensor& dy, DenseRoutes* routes) {
    fc->zero_grad();
    auto x = input.detach().clone().requires_grad_(true);
    torch::Tensor y;
    {
        Bf16Autocast autocast;
        y = dense(*fc, x, routes);
    }
    y.backward(dy);
    return {y.detach(), x.grad(), fc->weight.grad().clone(),
            fc->bias.defined() ? fc->bias.grad().clone() : torch::Tensor()};
}

} // namespace

TEST(DenseBf16, EveryRouteGivesTheBf16ValuesProductsAndGradients) {
    auto gen = at::detail::createCPUGenerator(11);
    for (const auto route : cpu::availableBf16Routes()) {
        const RouteScope scope(cpu::bf16RouteKey(route));
        for (const int threads : {1, 2}) {
            at::set_num_threads(threads);
            for (const bool bias : {true, false}) {
                for (const auto inputType : {at::kBFloat16, at::kFloat}) {
                    const std::int64_t m = 37, k = 70, n = 19; // odd: no tile or vector width fits exactly
                    torch::nn::Linear fc(torch::nn::LinearOptions(k, n).bias(bias));
                    {
                        torch::NoGradGuard noGrad;
                        fc->weight.normal_(0, 0.3, gen);
                        if (bias) {
                            fc->bias.uniform_(-1, 1, gen);
                        }
                    }
                    const auto x = torch::randn({m, k}, gen).to(inputType);
                    const auto dy = torch::randn({m, n}, gen).to(at::kBFloat16);
                    auto routes = makeDenseRoutes();
                    const auto got = runDense(fc, x, dy, routes.get());
                    const std::string what = std::string(cpu::bf16RouteName(route)) + ", " + std::to_string(threads) +
                                             " thread(s), bias " + (bias ? "yes" : "no") + ", input " +
                                             (inputType == at::kFloat ? "fp32" : "bf16");
                    EXPECT_EQ(got.y.scalar_type(), at::kBFloat16) << what;
                    EXPECT_EQ(got.dx.scalar_type(), inputType) << what;
                    EXPECT_EQ(got.dw.scalar_type(), at::kFloat) << what;
                    const auto xv = bf16Values(x), wv = bf16Values(fc->weight), dyv = dy.to(at::kDouble);
                    auto y = xv.mm(wv.t());
                    if (bias) {
                        y += fc->bias.detach().to(at::kDouble);
                        expectNear(got.db, dyv.sum(0), what + ": bias gradient");
                    }
                    expectNear(got.y, y, what + ": output");
                    expectNear(got.dx, dyv.mm(wv), what + ": input gradient");
                    expectNear(got.dw, dyv.t().mm(xv), what + ": weight gradient");
                    EXPECT_NE(describeDenseRoutes(*routes).find("DEVICERACE_BF16_ROUTE"), std::string::npos)
                        << describeDenseRoutes(*routes);
                    // autocast's own linear: the same output within bf16 rounding
                    torch::Tensor reference;
                    {
                        Bf16Autocast autocast;
                        torch::NoGradGuard noGrad;
                        reference = fc->forward(x);
                    }
                    expectNear(got.y, reference.to(at::kDouble), what + ": against autocast's linear");
                }
            }
        }
    }
    at::set_num_threads(1);
}

TEST(DenseBf16, OnlyABf16AutocastLaneWithRoutesTakesTheNode) {
    auto gen = at::detail::createCPUGenerator(5);
    torch::nn::Linear fc(12, 5);
    const auto x = torch::randn({6, 12}, gen);
    auto routes = makeDenseRoutes();
    EXPECT_FALSE(routedDenseFits(*fc, x)); // no autocast: fp32
    EXPECT_TRUE(torch::equal(dense(*fc, x, routes.get()), fc->forward(x)));
    EXPECT_TRUE(describeDenseRoutes(*routes).empty()) << "nothing was routed";
    {
        at::autocast::set_autocast_dtype(at::kCPU, at::kHalf);
        at::autocast::set_autocast_enabled(at::kCPU, true);
        EXPECT_FALSE(routedDenseFits(*fc, x)) << "fp16 autocast is not the bf16 lane's";
        at::autocast::set_autocast_enabled(at::kCPU, false);
        at::autocast::clear_cache();
    }
    Bf16Autocast autocast;
    EXPECT_TRUE(routedDenseFits(*fc, x));
    EXPECT_FALSE(routedDenseFits(*fc, x.unsqueeze(0))) << "the node takes rows (dense() flattens a 3-D input)";
    EXPECT_TRUE(torch::equal(dense(*fc, x, nullptr), fc->forward(x))) << "no routes: the module's forward";
    FastPaths plan;
    EXPECT_EQ(denseRoutesFor(plan), nullptr) << "a plan without the bf16-dense lever makes no routes";
    plan.bf16Dense = true;
    EXPECT_NE(denseRoutesFor(plan), nullptr);
}

// A transformer's layers in evaluation: dense() routes the rows of every leading index of a 3-D
// input as one matrix, its output shaped as the module's and within bf16 rounding of autocast's
// linear; on the fp32 route the output is the bf16 values of the fp32 sums (plus the bias) in an
// fp32 tensor, rounded once; a weight of no module (a tied head) likewise. An evaluation pass of
// fewer rows (a model sampling text, one length after another) keeps autocast's linear and times
// no route; a training pass routes whatever its rows.
TEST(DenseBf16, EvaluationRoutesTheRowsOfA3dInputAndLeavesFewRowsToAutocast) {
    RouteScope scope("fp32");
    auto gen = at::detail::createCPUGenerator(9);
    torch::nn::Linear fc(48, 20);
    Bf16Autocast autocast;
    {
        auto routes = makeDenseRoutes();
        const torch::NoGradGuard noGrad;
        const auto small = torch::randn({2, 30, 48}, gen);
        EXPECT_TRUE(torch::equal(dense(*fc, small, routes.get()), fc->forward(small)));
        EXPECT_TRUE(describeDenseRoutes(*routes).empty()) << describeDenseRoutes(*routes);
        const auto x = torch::randn({4, 300, 48}, gen);
        const auto y = dense(*fc, x, routes.get());
        EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{4, 300, 20}));
        ASSERT_EQ(y.scalar_type(), at::kFloat);
        EXPECT_TRUE(torch::equal(y, y.to(at::kBFloat16).to(at::kFloat))) << "bf16 values";
        EXPECT_EQ(describeDenseRoutes(*routes), "fp32 for every GEMM (DEVICERACE_BF16_ROUTE)");
        const auto want = fc->forward(x).to(at::kDouble);
        const double scale = want.abs().max().item<double>();
        EXPECT_LT((y.to(at::kDouble) - want).abs().max().item<double>(), scale / 64);
        const auto bf16Values = [](const torch::Tensor& t) { return t.to(at::kBFloat16).to(at::kFloat); };
        const auto sums = at::matmul(bf16Values(x), bf16Values(fc->weight).t()) + fc->bias;
        EXPECT_LT((y - bf16Values(sums)).abs().max().item<double>(), scale / 128) << "the fp32 sums rounded once";
        const auto head = dense(fc->weight, {}, x, routes.get());
        EXPECT_TRUE(torch::equal(head, bf16Values(head)));
        EXPECT_LT((head.to(at::kDouble) - (want - fc->bias.to(at::kDouble))).abs().max().item<double>(), scale / 64)
            << "a weight of no module, no bias";
    }
    auto routes = makeDenseRoutes();
    const auto few = torch::randn({3, 5, 48}, gen).requires_grad_();
    dense(*fc, few, routes.get()).to(at::kFloat).sum().backward();
    EXPECT_FALSE(describeDenseRoutes(*routes).empty()) << "training routes its few rows";
    EXPECT_TRUE(few.grad().defined());
}
