// The CPU convolution whose weight gradient may be im2col + one GEMM (models.h convolve) against
// the module's own: the same output, input gradient and weight gradient (float rounding), for
// 1x1, 3x3 and 5x5 kernels on odd, non-square sizes, chunked or not, on 1 and 2 threads; where
// it does not apply (stride 2, a bias, NCHW, no gradient, fused=false) the module's forward runs.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "models/models.h"

using namespace devicerace::detail;

namespace {

// DEVICERACE_CONV_WGRAD for the scope of one test.
struct WgradMode {
    explicit WgradMode(const char* v) { ::setenv("DEVICERACE_CONV_WGRAD", v, 1); }
    ~WgradMode() { ::unsetenv("DEVICERACE_CONV_WGRAD"); }
};

torch::nn::Conv2d makeConv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride = 1,
                           bool bias = false) {
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(bias));
    torch::NoGradGuard noGrad;
    auto gen = at::detail::createCPUGenerator(3);
    conv->weight.normal_(0, 0.5, gen);
    conv->weight.set_data(conv->weight.contiguous(at::MemoryFormat::ChannelsLast));
    return conv;
}

struct Grads {
    torch::Tensor out, dx, dw;
};

Grads run(torch::nn::Conv2d& conv, const torch::Tensor& input, bool fused) {
    conv->zero_grad();
    auto x = input.contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true);
    auto out = convolve(*conv, x, fused);
    auto weight = torch::linspace(-1.0, 2.0, out.numel()).view(out.sizes());
    (out * weight).sum().backward();
    return {out.detach().clone(), x.grad().clone(), conv->weight.grad().clone()};
}

void expectClose(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
    ASSERT_EQ(a.sizes(), b.sizes()) << what;
    const double scale = std::max(1.0, b.abs().max().item<double>());
    EXPECT_LE((a - b).abs().max().item<double>() / scale, 2e-5) << what;
}

} // namespace

TEST(ConvWeightGrad, TheGemmPathGivesTheModulesGradients) {
    WgradMode gemm("gemm");
    struct Shape {
        std::int64_t n, c, oc, h, w, k;
    };
    // The last: 1.1 MB of columns an image, so 32 MiB chunks split the batch (and its GEMM's sum).
    for (const auto& s :
         {Shape{3, 5, 7, 6, 5, 3}, Shape{2, 8, 4, 7, 9, 1}, Shape{2, 3, 6, 5, 4, 5}, Shape{31, 64, 8, 32, 24, 3}}) {
        for (const int threads : {1, 2}) {
            at::set_num_threads(threads);
            auto conv = makeConv(s.c, s.oc, s.k);
            ASSERT_TRUE(tunedWeightGradFits(
                *conv,
                torch::randn({s.n, s.c, s.h, s.w}).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true)));
            auto gen = at::detail::createCPUGenerator(11);
            const auto input = torch::randn({s.n, s.c, s.h, s.w}, gen);
            const auto plain = run(conv, input, false);
            const auto fused = run(conv, input, true);
            std::ostringstream shape;
            shape << "n" << s.n << " c" << s.c << "->" << s.oc << " " << s.h << "x" << s.w << " k" << s.k << ", "
                  << threads << " thread(s)";
            const auto what = shape.str();
            expectClose(fused.out, plain.out, "output, " + what);
            expectClose(fused.dx, plain.dx, "input gradient, " + what);
            expectClose(fused.dw, plain.dw, "weight gradient, " + what);
            EXPECT_GT(plain.dw.abs().max().item<double>(), 0) << what;
        }
    }
    at::set_num_threads(1);
}

TEST(ConvWeightGrad, TheTunedChoiceGivesTheModulesGradientsEitherWay) {
    // Whichever path the timing picks for the shape, the gradients are the module's.
    auto conv = makeConv(16, 16, 3);
    auto gen = at::detail::createCPUGenerator(12);
    const auto input = torch::randn({4, 16, 8, 8}, gen);
    const auto plain = run(conv, input, false);
    for (int step = 0; step < 3; ++step) { // the first times both; later ones take the choice
        const auto fused = run(conv, input, true);
        expectClose(fused.dw, plain.dw, "weight gradient");
        expectClose(fused.dx, plain.dx, "input gradient");
    }
}

TEST(ConvWeightGrad, WhereItDoesNotApplyTheModuleRuns) {
    const auto cl = [](torch::Tensor t) { return t.contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true); };
    auto plain = makeConv(4, 4, 3);
    auto strided = makeConv(4, 4, 3, 2);
    auto biased = makeConv(4, 4, 3, 1, true);
    const auto x = torch::randn({2, 4, 6, 6});
    EXPECT_TRUE(tunedWeightGradFits(*plain, cl(x)));
    EXPECT_FALSE(tunedWeightGradFits(*strided, cl(x)));
    EXPECT_FALSE(tunedWeightGradFits(*biased, cl(x)));
    EXPECT_FALSE(tunedWeightGradFits(*plain, x.requires_grad_(true))); // NCHW
    EXPECT_FALSE(tunedWeightGradFits(*plain, cl(x.to(torch::kDouble))));
    {
        torch::NoGradGuard noGrad; // evaluation
        EXPECT_FALSE(tunedWeightGradFits(*plain, cl(x)));
    }
    {
        WgradMode off("0");
        EXPECT_FALSE(tunedWeightGradFits(*plain, cl(x)));
    }
    // Not applied: the module's own autograd node.
    const auto out = convolve(*strided, cl(x), true);
    EXPECT_NE(out.grad_fn()->name().find("Convolution"), std::string::npos) << out.grad_fn()->name();
    const auto tuned = convolve(*plain, cl(x), true);
    EXPECT_NE(tuned.grad_fn()->name().find("ConvTunedWeightGrad"), std::string::npos) << tuned.grad_fn()->name();
    const auto unfused = convolve(*plain, cl(x), false);
    EXPECT_NE(unfused.grad_fn()->name().find("Convolution"), std::string::npos) << unfused.grad_fn()->name();
}
