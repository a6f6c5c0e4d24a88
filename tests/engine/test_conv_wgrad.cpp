// The CPU convolution whose weight gradient may be im2col + one GEMM (models.h convolve) against
// the module's own: the same output, input, weight and bias gradients (float rounding), for 1x1,
// 3x3 and 5x5 kernels on odd, non-square sizes, with and without padding and a bias, chunked or
// not, strided or not, on 1 and 2 threads; where it does not apply (groups, dilation, NCHW, one
// input channel with NCHW strides, float64, no gradient, fused=false) the module's forward runs.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "data/lane_data.h"
#include "devicerace/peak_flops.h"
#include "devices/cpu_info.h"
#include "kernels/bf16_gemm.h"
#include "kernels/node_casts.h"
#include "kernels/conv_wgrad.h"
#include "models/models.h"

using namespace devicerace::detail;

namespace {

// DEVICERACE_CONV_WGRAD for the scope of one test.
struct WgradMode {
    explicit WgradMode(const char* v) { ::setenv("DEVICERACE_CONV_WGRAD", v, 1); }
    ~WgradMode() { ::unsetenv("DEVICERACE_CONV_WGRAD"); }
};

// Whether a bf16 autocast lane's convolutions take the node here: with the AVX-512 BF16 kernel, or
// without bf16 units (then on their bf16 values in fp32).
bool nodeTakesBf16() {
    return devicerace::detail::cpu::haveAvx512Bf16Gemm() || devicerace::detail::readHostCpu().bf16Units.empty();
}

// DEVICERACE_BF16_CONV (a bf16 lane's convolutions' arithmetic) for a scope.
struct Bf16ConvMode {
    explicit Bf16ConvMode(const char* v) { ::setenv("DEVICERACE_BF16_CONV", v, 1); }
    ~Bf16ConvMode() { ::unsetenv("DEVICERACE_BF16_CONV"); }
};

// pad -1: "same" (k / 2); 0: "valid" (Keras' default), a smaller output.
torch::nn::Conv2d makeConv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride = 1,
                           bool bias = false, std::int64_t pad = -1) {
    torch::nn::Conv2d conv(
        torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(pad < 0 ? k / 2 : pad).bias(bias));
    torch::NoGradGuard noGrad;
    auto gen = at::detail::createCPUGenerator(3);
    conv->weight.normal_(0, 0.5, gen);
    if (bias) {
        conv->bias.uniform_(-1, 1, gen);
    }
    conv->weight.set_data(conv->weight.contiguous(at::MemoryFormat::ChannelsLast));
    return conv;
}

struct Grads {
    torch::Tensor out, dx, dw, db;
};

Grads run(torch::nn::Conv2d& conv, const torch::Tensor& input, bool fused) {
    conv->zero_grad();
    // A leaf of its own (with one channel, contiguous() would hand back `input` itself, and the
    // second run's gradient would add to the first's).
    auto x = input.clone(at::MemoryFormat::ChannelsLast).requires_grad_(true);
    auto out = convolve(*conv, x, fused);
    auto weight = torch::linspace(-1.0, 2.0, out.numel()).view(out.sizes());
    (out * weight).sum().backward();
    return {out.detach().clone(), x.grad().clone(), conv->weight.grad().clone(),
            conv->bias.defined() ? conv->bias.grad().clone() : torch::Tensor()};
}

void expectClose(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
    ASSERT_EQ(a.sizes(), b.sizes()) << what;
    const double scale = std::max(1.0, b.abs().max().item<double>());
    EXPECT_LE((a - b).abs().max().item<double>() / scale, 2e-5) << what;
}

// run() as a bf16 lane steps: the forward under bf16 autocast, the backward after it.
Grads runBf16(torch::nn::Conv2d& conv, const torch::Tensor& input, bool fused) {
    conv->zero_grad();
    auto x = input.clone(at::MemoryFormat::ChannelsLast).requires_grad_(true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    EXPECT_EQ(tunedWeightGradFits(*conv, x), nodeTakesBf16());
    auto out = convolve(*conv, x, fused);
    if (fused) {
        EXPECT_NE(out.grad_fn()->name().find("ConvTunedWeightGrad"), std::string::npos) << out.grad_fn()->name();
    }
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    auto weight = torch::linspace(-1.0, 2.0, out.numel()).view(out.sizes());
    (out * weight).sum().backward();
    return {out.detach().clone(), x.grad().clone(), conv->weight.grad().clone(),
            conv->bias.defined() ? conv->bias.grad().clone() : torch::Tensor()};
}

// As a lane feeds its network (and as clone(ChannelsLast) in run() lays it out): channels_last
// strides on every dimension, a one-channel input's too.
torch::Tensor channelsLast(const torch::Tensor& t) { return channelsLastStrided(t).requires_grad_(true); }

struct Shape {
    std::int64_t n, c, oc, h, w, k;
    bool bias = false;
    std::int64_t pad = -1;
    std::int64_t stride = 1;
};

std::string describe(const Shape& s, int threads) {
    std::ostringstream shape;
    shape << "n" << s.n << " c" << s.c << "->" << s.oc << " " << s.h << "x" << s.w << " k" << s.k << " pad " << s.pad
          << " stride " << s.stride << (s.bias ? " bias" : "") << ", " << threads << " thread(s)";
    return shape.str();
}

// Each shape on 1 and 2 threads: f(shape, threads, its convolution, a channels_last input drawn
// with `seed`). Leaves one thread set.
template <class Shapes, class F>
void onEachShape(const Shapes& shapes, std::uint64_t seed, F&& f) {
    for (const auto& s : shapes) {
        for (const int threads : {1, 2}) {
            at::set_num_threads(threads);
            auto conv = makeConv(s.c, s.oc, s.k, s.stride, s.bias, s.pad);
            auto gen = at::detail::createCPUGenerator(seed);
            f(s, threads, conv, channelsLastStrided(torch::randn({s.n, s.c, s.h, s.w}, gen)));
        }
    }
    at::set_num_threads(1);
}

// A cache folder of the test's own for the machine's choices (DEVICERACE_CACHE_DIR), removed at the
// end. Not test::TempDir: linked to libtorch.so directly, this binary gets libtorch's exported
// std::filesystem::remove_all, which crashes (a null call); the files are removed one by one.
struct ChoiceDir {
    ChoiceDir() {
        std::string made = (std::filesystem::temp_directory_path() / "devicerace-conv-choice-XXXXXX").string();
        if (!::mkdtemp(made.data())) {
            throw std::runtime_error("mkdtemp failed");
        }
        path = made;
        ::setenv("DEVICERACE_CACHE_DIR", path.c_str(), 1);
        forgetConvChoices();
    }
    ~ChoiceDir() {
        forgetConvChoices();
        ::unsetenv("DEVICERACE_CACHE_DIR");
        std::error_code ec;
        for (const char* name : {"conv-wgrad.json", "conv-wgrad.lock", "peaks.json"}) {
            std::filesystem::remove(path / name, ec);
        }
        std::filesystem::remove(path, ec);
    }
    ChoiceDir(const ChoiceDir&) = delete;
    ChoiceDir& operator=(const ChoiceDir&) = delete;
    static nlohmann::json read() {
        std::ifstream in(convChoiceFile());
        return nlohmann::json::parse(in);
    }
    static void write(const nlohmann::json& j) { std::ofstream(convChoiceFile()) << j.dump(); }
    std::filesystem::path path;
};

} // namespace

// The nodes' casts (kernels/node_casts.h) by the engine's loops: ATen's `to` bit for bit, both
// ways, ties to even and -0 included; a NaN stays a NaN (the engine writes bf16's quiet NaN 0x7FC0,
// ATen's vectorised cast 0xFFFF); a channels_last tensor keeps its strides; a strided view comes
// out contiguous with the same values.
TEST(NodeCasts, TheEnginesCastsAreAtensBitForBitAndKeepTheStrides) {
    auto gen = at::detail::createCPUGenerator(3);
    auto x = at::randn({3, 5, 7, 9}, gen).contiguous(at::MemoryFormat::ChannelsLast);
    float* first = x.data_ptr<float>(); // channels_last is dense: its storage in memory order
    first[0] = 1.0f + 1.0f / 256;       // a tie: to even, 1.0
    first[1] = 1.0f + 3.0f / 256;       // a tie: to even, 1 + 1/64
    first[2] = std::numeric_limits<float>::quiet_NaN();
    first[3] = -0.0f;
    // the bits, in one order for both sides, each NaN as one NaN
    const auto bits = [](const at::Tensor& t) {
        const auto c = t.contiguous();
        return c.masked_fill(c.isnan(), std::numeric_limits<float>::quiet_NaN())
            .view(t.scalar_type() == at::kBFloat16 ? at::kShort : at::kInt);
    };
    const auto down = castFloat(x, true);
    EXPECT_EQ(down.scalar_type(), at::kBFloat16);
    EXPECT_EQ(down.strides(), x.strides());
    const auto want = x.to(at::kBFloat16);
    EXPECT_TRUE(at::equal(bits(down), bits(want)));
    const auto up = castFloat(down, false);
    EXPECT_EQ(up.scalar_type(), at::kFloat);
    EXPECT_EQ(up.strides(), x.strides());
    EXPECT_TRUE(at::equal(bits(up), bits(want.to(at::kFloat))));
    const auto strided = x.narrow(3, 1, 4); // not dense
    EXPECT_TRUE(at::equal(bits(castFloat(strided, true)), bits(strided.to(at::kBFloat16))));
    EXPECT_TRUE(castFloat(x, false).is_same(x)); // nothing to cast
}

TEST(ConvWeightGrad, TheGemmPathGivesTheModulesGradients) {
    WgradMode gemm("gemm");
    // The 31-image one: 1.1 MB of columns an image, so 32 MiB chunks split the batch (and its
    // GEMM's sum). The bias-and-no-padding one is a Keras "valid" layer, in miniature; the
    // stride-2 ones ResNet-50's 3x3, its 7x7 stem and its 1x1 projection, on odd sizes.
    const Shape shapes[] = {{3, 5, 7, 6, 5, 3},
                            {2, 8, 4, 7, 9, 1},
                            {2, 3, 6, 5, 4, 5},
                            {31, 64, 8, 32, 24, 3},
                            {3, 2, 6, 9, 8, 3, true, 0},
                            {2, 5, 3, 6, 7, 3, true},
                            {2, 4, 5, 7, 6, 5, false, 1},
                            {3, 6, 5, 9, 8, 3, false, 1, 2},
                            {2, 3, 4, 11, 10, 7, true, 3, 2},
                            {2, 8, 6, 7, 9, 1, false, 0, 2},
                            {3, 1, 8, 9, 9, 3, true, 0}}; // fashion-cnn's first layer: one channel
    for (const auto& s : shapes) {
        for (const int threads : {1, 2}) {
            at::set_num_threads(threads);
            auto conv = makeConv(s.c, s.oc, s.k, s.stride, s.bias, s.pad);
            ASSERT_TRUE(tunedWeightGradFits(*conv, channelsLast(torch::randn({s.n, s.c, s.h, s.w}))));
            auto gen = at::detail::createCPUGenerator(11);
            const auto input = torch::randn({s.n, s.c, s.h, s.w}, gen);
            const auto plain = run(conv, input, false);
            const auto fused = run(conv, input, true);
            const auto what = describe(s, threads);
            expectClose(fused.out, plain.out, "output, " + what);
            expectClose(fused.dx, plain.dx, "input gradient, " + what);
            expectClose(fused.dw, plain.dw, "weight gradient, " + what);
            EXPECT_GT(plain.dw.abs().max().item<double>(), 0) << what;
            if (s.bias) {
                expectClose(fused.db, plain.db, "bias gradient, " + what);
            }
        }
    }
    at::set_num_threads(1);
}

// A bf16 lane's convolution on a CPU with AVX-512 BF16: the same output and input gradient as the
// module under autocast (the same oneDNN calls on the same bf16 values), and a weight gradient from
// the engine's kernel that is the exact one of those bf16 values to fp32 rounding (float64
// reference), where oneDNN's is rounded to bf16 (~4e-3).
TEST(ConvWeightGrad, TheBf16KernelGivesTheWeightGradientOfTheBf16Convolution) {
    if (!devicerace::detail::cpu::haveAvx512Bf16Gemm()) {
        GTEST_SKIP() << "this CPU has no AVX-512 BF16: bf16 lanes keep oneDNN's weight gradient";
    }
    WgradMode gemm("gemm");
    Bf16ConvMode onBf16("bf16"); // (not its bf16 values in fp32, where this CPU's bf16 is the slower)
    // The CIFAR ResNets' layers in miniature (16, 32, 64 channels, stride 2), runs of channels
    // shorter than a panel (3, 5, 24), a 7x7 stem, 1x1, a bias, no padding, one channel, pixel
    // counts that split unevenly (odd ones too) and over 2 x 256 pixels; and the layers whose x is
    // read in place as pairs of columns (3x3, 5x5, 1x1; odd heights).
    const Shape shapes[] = {{4, 16, 16, 12, 12, 3},
                            {3, 16, 32, 11, 9, 3, false, -1, 2},
                            {2, 32, 64, 8, 8, 3, false, -1, 2},
                            {2, 64, 64, 6, 6, 3},
                            {3, 3, 16, 16, 15, 3},
                            {2, 5, 7, 9, 7, 3, true},
                            {3, 24, 40, 7, 9, 3, false, 0},
                            {2, 3, 8, 13, 11, 7, true, 3, 2},
                            {2, 8, 6, 7, 9, 1, false, 0, 2},
                            {3, 1, 8, 9, 9, 3, true, 0},
                            {1, 48, 20, 5, 3, 3},
                            // stride 1, "same" padding, even widths, 16 channels a run: x read as pairs
                            {3, 16, 16, 16, 16, 3},
                            {2, 32, 24, 17, 20, 3},
                            {2, 48, 8, 16, 10, 5},
                            {2, 16, 40, 18, 6, 1}};
    onEachShape(shapes, 31, [](const Shape& s, int threads, torch::nn::Conv2d& conv, const torch::Tensor& input) {
        const auto plain = runBf16(conv, input, false);
        const auto fused = runBf16(conv, input, true);
        const auto what = describe(s, threads);
        EXPECT_TRUE(torch::equal(fused.out, plain.out)) << "output, " << what;
        EXPECT_TRUE(torch::equal(fused.dx, plain.dx)) << "input gradient, " << what;
        // The exact gradient of the bf16 values both convolutions multiply.
        const auto xb = input.to(at::kBFloat16).to(at::kDouble);
        const auto wb = conv->weight.detach().to(at::kBFloat16).to(at::kDouble);
        const auto gy =
            torch::linspace(-1.0, 2.0, plain.out.numel()).view(plain.out.sizes()).to(at::kBFloat16).to(at::kDouble);
        const auto pad = s.pad < 0 ? s.k / 2 : s.pad;
        const auto exact =
            std::get<1>(at::convolution_backward(gy, xb, wb, std::nullopt, {s.stride, s.stride}, {pad, pad}, {1, 1},
                                                 false, {0, 0}, 1, {false, true, false}));
        ASSERT_EQ(fused.dw.scalar_type(), at::kFloat) << what;
        const double scale = std::max(1.0, exact.abs().max().item<double>());
        EXPECT_LE((fused.dw.to(at::kDouble) - exact).abs().max().item<double>() / scale, 2e-6)
            << "weight gradient, " << what;
        EXPECT_LE((plain.dw.to(at::kDouble) - exact).abs().max().item<double>() / scale, 1e-2)
            << "oneDNN's weight gradient, " << what;
        if (s.bias) {
            const auto db = gy.sum({0, 2, 3});
            EXPECT_LE((fused.db.to(at::kDouble) - db).abs().max().item<double>() / scale, 2e-6)
                << "bias gradient, " << what;
        }
    });
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
    auto plain = makeConv(4, 4, 3);
    auto strided = makeConv(4, 4, 3, 2);
    auto grouped = torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 4, 3).padding(1).groups(2).bias(false));
    auto biased = makeConv(4, 4, 3, 1, true);
    auto wide = makeConv(4, 4, 5, 1, false, 0); // a 5x5 kernel, no padding, on 4x4: no output
    auto dilated = torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 4, 3).padding(2).dilation(2).bias(false));
    const auto x = torch::randn({2, 4, 6, 6});
    EXPECT_TRUE(tunedWeightGradFits(*plain, channelsLast(x)));
    EXPECT_TRUE(tunedWeightGradFits(*biased, channelsLast(x)));
    EXPECT_TRUE(tunedWeightGradFits(*strided, channelsLast(x)));
    EXPECT_FALSE(tunedWeightGradFits(*grouped, channelsLast(x)));
    EXPECT_FALSE(tunedWeightGradFits(*wide, channelsLast(torch::randn({2, 4, 4, 4}))));
    EXPECT_FALSE(tunedWeightGradFits(*dilated, channelsLast(x)));
    EXPECT_FALSE(tunedWeightGradFits(*plain, x.clone().requires_grad_(true))); // NCHW
    EXPECT_FALSE(tunedWeightGradFits(*plain, channelsLast(x.to(torch::kDouble))));
    // One channel: contiguous(ChannelsLast) hands back NCHW strides, which oneDNN reads as NCHW
    // and so writes an NCHW output; with channels_last strides (as lanes feed it) it fits.
    auto gray = makeConv(1, 4, 3);
    const auto grayInput = torch::randn({2, 1, 6, 6});
    EXPECT_FALSE(tunedWeightGradFits(*gray, grayInput.contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true)));
    EXPECT_TRUE(tunedWeightGradFits(*gray, channelsLast(grayInput)));
    {
        torch::NoGradGuard noGrad; // evaluation
        EXPECT_FALSE(tunedWeightGradFits(*plain, channelsLast(x)));
    }
    {
        WgradMode off("0");
        EXPECT_FALSE(tunedWeightGradFits(*plain, channelsLast(x)));
    }
    // Not applied: the module's own autograd node.
    const auto out = convolve(*grouped, channelsLast(x), true);
    EXPECT_NE(out.grad_fn()->name().find("Convolution"), std::string::npos) << out.grad_fn()->name();
    const auto tuned = convolve(*plain, channelsLast(x), true);
    EXPECT_NE(tuned.grad_fn()->name().find("ConvTunedWeightGrad"), std::string::npos) << tuned.grad_fn()->name();
    const auto unfused = convolve(*plain, channelsLast(x), false);
    EXPECT_NE(unfused.grad_fn()->name().find("Convolution"), std::string::npos) << unfused.grad_fn()->name();
}

// Two lanes meeting a new shape at once (thread lanes of one race): the first times both paths
// while the other waits, so both take the same path from their first step and train
// bit-identically, as lanes with one seed must.
TEST(ConvWeightGrad, LanesMeetingANewShapeAtOnceTakeTheSamePath) {
    const auto lane = [](std::vector<Grads>& out) {
        at::set_num_threads(1);
        auto conv = makeConv(24, 40, 3);
        auto gen = at::detail::createCPUGenerator(21);
        const auto input = torch::randn({5, 24, 11, 13}, gen); // a shape no other test uses
        for (int step = 0; step < 3; ++step) {
            out.push_back(run(conv, input * (1 + step), true));
        }
    };
    std::vector<Grads> a, b;
    std::thread first(lane, std::ref(a)), second(lane, std::ref(b));
    first.join();
    second.join();
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(torch::equal(a[i].dw, b[i].dw)) << "step " << i;
        EXPECT_TRUE(torch::equal(a[i].dx, b[i].dx)) << "step " << i;
    }
}

// The choice is the machine's: the first process to meet a shape times it and writes it beside the
// peak cache; another (here: this one, its own choices forgotten) reads it there and takes that
// path, whatever its own timing would say, so worker processes and data-parallel ranks with one
// seed train bit-identically (a choice timed in each process let a near-tie part a Slurm lane
// from the local two-worker lane). A broken file is timed over and rewritten.
TEST(ConvWeightGrad, AChoiceIsKeptForTheMachineAndFollowed) {
    const ChoiceDir dir;
    at::set_num_threads(1);
    auto conv = makeConv(16, 24, 3);
    auto gen = at::detail::createCPUGenerator(13);
    const auto input = torch::randn({8, 16, 12, 12}, gen);
    torch::Tensor byGemm;
    {
        WgradMode gemm("gemm");
        byGemm = run(conv, input, true).dw;
    }
    const auto byModule = run(conv, input, false).dw;
    const auto readChoices = &ChoiceDir::read;
    run(conv, input, true); // times the shape and keeps the choice
    ASSERT_EQ(convChoiceFile(), dir.path / "conv-wgrad.json");
    auto file = readChoices();
    ASSERT_EQ(file["choices"].size(), 1u) << file.dump();
    const std::string key = file["choices"].begin().key();
    EXPECT_NE(key.find("|n8 c16->24 12x12 k3x3 pad 1x1 stride 1x1|1 threads"), std::string::npos) << key;
    EXPECT_NE(key.find("LibTorch"), std::string::npos) << key;
    const bool pathsDiffer = !at::equal(byGemm, byModule);
    for (const char* choice : {"gemm", "onednn", "gemm"}) {
        file["choices"][key] = choice;
        ChoiceDir::write(file);
        forgetConvChoices();
        const auto dw = run(conv, input, true).dw;
        expectClose(dw, byModule, std::string("weight gradient, the file saying ") + choice);
        if (choice == std::string("gemm")) {
            EXPECT_TRUE(at::equal(dw, byGemm)) << "the file said gemm";
        } else if (pathsDiffer) {
            EXPECT_FALSE(at::equal(dw, byGemm)) << "the file said onednn";
        }
        EXPECT_EQ(readChoices()["choices"][key], choice); // followed, not timed over
    }
    std::ofstream(convChoiceFile()) << "{ not json";
    forgetConvChoices();
    run(conv, input, true);
    const auto rewritten = readChoices();
    EXPECT_EQ(rewritten["choices"].size(), 1u) << rewritten.dump();
    EXPECT_TRUE(rewritten["choices"].contains(key)) << rewritten.dump();
}

// A pick timed while the CPU is busy is provisional: kept with its time and the CPU share its timing
// got, followed by any process for kProvisionalSeconds (so the ranks of one race agree), then timed
// again. Here the CPU is made busy for real: twice as many spinning threads as it has cores.
TEST(ConvWeightGrad, APickTimedOnABusyCpuIsProvisional) {
    const ChoiceDir dir;
    at::set_num_threads(1);
    auto conv = makeConv(12, 20, 3);
    auto gen = at::detail::createCPUGenerator(17);
    const auto input = torch::randn({6, 12, 10, 10}, gen); // a shape no other test uses
    torch::Tensor byGemm;
    {
        WgradMode gemm("gemm");
        byGemm = run(conv, input, true).dw;
    }
    const auto readChoices = &ChoiceDir::read;
    {
        std::atomic<bool> stop{false};
        std::vector<std::thread> spinners;
        for (unsigned i = 0; i < 2 * std::max(1u, std::thread::hardware_concurrency()); ++i) {
            spinners.emplace_back([&stop] {
                volatile double x = 0;
                while (!stop.load(std::memory_order_relaxed)) {
                    x = x + 1;
                }
            });
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        run(conv, input, true); // times the shape on a busy CPU
        stop = true;
        for (auto& t : spinners) {
            t.join();
        }
    }
    auto file = readChoices();
    ASSERT_EQ(file["choices"].size(), 1u) << file.dump();
    const std::string key = file["choices"].begin().key();
    const auto entry = file["choices"][key];
    ASSERT_TRUE(entry.is_object()) << "a pick timed on a busy CPU was kept for good: " << entry.dump();
    EXPECT_TRUE(entry["cpu_share"].get<double>() < 0.85 || entry["runnable_tasks"].get<int>() > 1) << entry.dump();
    const double now = entry["timed_at"].get<double>();
    // Fresh: followed as it is, not timed over.
    file["choices"][key] = {{"pick", "gemm"}, {"timed_at", now}, {"cpu_share", 0.4}};
    ChoiceDir::write(file);
    forgetConvChoices();
    EXPECT_TRUE(at::equal(run(conv, input, true).dw, byGemm)) << "a fresh provisional gemm pick was not followed";
    EXPECT_EQ(readChoices()["choices"][key], file["choices"][key]);
    // An hour old: timed again (idle now, so kept for good; a busy CI machine may keep it provisional,
    // but then with a new time).
    file["choices"][key] = {{"pick", "gemm"}, {"timed_at", now - 3600}, {"cpu_share", 0.4}};
    ChoiceDir::write(file);
    forgetConvChoices();
    run(conv, input, true);
    const auto retimed = readChoices()["choices"][key];
    EXPECT_TRUE(retimed.is_string() || retimed["timed_at"].get<double>() >= now) << retimed.dump();
    // Not ours (no pick): timed again too.
    file["choices"][key] = {{"timed_at", now}};
    ChoiceDir::write(file);
    forgetConvChoices();
    run(conv, input, true);
    const auto rewritten = ChoiceDir::read()["choices"][key];
    EXPECT_TRUE(rewritten.is_string() || rewritten.contains("pick")) << rewritten.dump();
}

// Where a CPU's bf16 arithmetic is slower than its fp32 (an Intel Xeon's AVX-512 BF16 without AMX),
// a bf16 lane's convolution may run on its bf16 values widened to fp32: the output is the bf16
// rounding of the exact convolution of the bf16 values, and the gradients are those of the same
// values in fp32 sums, as the bf16 path's are (its output and input gradient rounded to bf16).
TEST(ConvWeightGrad, ABf16ConvolutionOnItsBf16ValuesInFp32GivesTheBf16Gradients) {
    if (!nodeTakesBf16()) {
        GTEST_SKIP() << "bf16 units without the AVX-512 BF16 kernel: a bf16 lane's convolutions are autocast's";
    }
    const Shape shapes[] = {{4, 16, 16, 12, 12, 3},
                            {3, 3, 16, 16, 15, 3, true},
                            {3, 16, 32, 11, 9, 3, false, -1, 2},
                            {3, 1, 8, 9, 9, 3, true, 0},
                            {2, 8, 6, 7, 9, 1, false, 0, 2}};
    onEachShape(shapes, 41, [](const Shape& s, int threads, torch::nn::Conv2d& conv, const torch::Tensor& input) {
        Grads onBf16, widened;
        {
            Bf16ConvMode mode("bf16");
            onBf16 = runBf16(conv, input, true);
        }
        {
            Bf16ConvMode mode("fp32");
            widened = runBf16(conv, input, true);
        }
        const auto what = describe(s, threads);
        ASSERT_EQ(widened.out.scalar_type(), at::kBFloat16) << "autocast's output type, " << what;
        ASSERT_EQ(widened.dw.scalar_type(), at::kFloat) << what;
        const auto xb = input.to(at::kBFloat16).to(at::kDouble);
        const auto wb = conv->weight.detach().to(at::kBFloat16).to(at::kDouble);
        const auto pad = s.pad < 0 ? s.k / 2 : s.pad;
        std::optional<at::Tensor> bias;
        if (s.bias) {
            bias = conv->bias.detach().to(at::kBFloat16).to(at::kDouble);
        }
        const auto y = at::convolution(xb, wb, bias, {s.stride, s.stride}, {pad, pad}, {1, 1}, false, {0, 0}, 1);
        const double yScale = std::max(1.0, y.abs().max().item<double>());
        // within bf16's rounding of the output (2^-8 of its magnitude)
        EXPECT_LE((widened.out.to(at::kDouble) - y).abs().max().item<double>() / yScale, 4e-3) << "output, " << what;
        EXPECT_LE((onBf16.out.to(at::kDouble) - y).abs().max().item<double>() / yScale, 4e-3)
            << "the bf16 path's output, " << what;
        const auto gy = torch::linspace(-1.0, 2.0, y.numel()).view(y.sizes()).to(at::kBFloat16).to(at::kDouble);
        const auto [dx, dw, unused] = at::convolution_backward(
            gy, xb, wb, std::nullopt, {s.stride, s.stride}, {pad, pad}, {1, 1}, false, {0, 0}, 1, {true, true, false});
        const double wScale = std::max(1.0, dw.abs().max().item<double>());
        EXPECT_LE((widened.dw.to(at::kDouble) - dw).abs().max().item<double>() / wScale, 2e-5)
            << "weight gradient, " << what;
        const double xScale = std::max(1.0, dx.abs().max().item<double>());
        EXPECT_LE((widened.dx.to(at::kDouble) - dx).abs().max().item<double>() / xScale, 2e-5)
            << "input gradient, " << what;
        if (s.bias) {
            EXPECT_LE((widened.db.to(at::kDouble) - gy.sum({0, 2, 3})).abs().max().item<double>() / wScale, 2e-5)
                << "bias gradient, " << what;
        }
    });
    Bf16ConvMode unknown("fp16");
    auto conv = makeConv(4, 4, 3);
    EXPECT_THROW(runBf16(conv, torch::randn({1, 4, 5, 5}), true), std::invalid_argument);
    at::autocast::set_autocast_enabled(at::kCPU, false);
}

// A bf16 lane evaluates a convolution as it trains it: where its arithmetic is the bf16 values in
// fp32, the evaluation's forward (no gradients) runs that too, its output autocast's bf16 of the
// same sums, not oneDNN's bf16 convolution (half the fp32 rate on a Xeon without AMX); where it is
// bf16, or outside a bf16 lane, the module's forward.
TEST(ConvWeightGrad, ABf16LaneEvaluatesAConvolutionInItsTrainingArithmetic) {
    if (!nodeTakesBf16()) {
        GTEST_SKIP() << "bf16 units without the AVX-512 BF16 kernel: a bf16 lane's convolutions are autocast's";
    }
    auto conv = makeConv(3, 8, 3, 1, true);
    auto gen = at::detail::createCPUGenerator(17);
    const auto x = torch::randn({5, 3, 12, 12}, gen).contiguous(at::MemoryFormat::ChannelsLast);
    const torch::NoGradGuard noGrad;
    EXPECT_TRUE(torch::equal(convolve(*conv, x, true), conv->forward(x))) << "fp32: the module's";
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    const auto autocast = conv->forward(x);
    torch::Tensor inFp32, onBf16, unfused;
    {
        Bf16ConvMode mode("fp32");
        inFp32 = convolve(*conv, x, true);
        unfused = convolve(*conv, x, false);
    }
    {
        Bf16ConvMode mode("bf16");
        onBf16 = convolve(*conv, x, true);
    }
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    const auto widened = [](const torch::Tensor& t) { return t.to(at::kBFloat16).to(at::kFloat); };
    const auto want = at::convolution(widened(x), widened(conv->weight), widened(conv->bias), {1, 1}, {1, 1}, {1, 1},
                                      false, {0, 0}, 1)
                          .to(at::kBFloat16);
    ASSERT_EQ(inFp32.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(torch::equal(inFp32, want)) << "the bf16 values' fp32 convolution, rounded once";
    const double scale = autocast.abs().max().item<double>();
    EXPECT_LE((inFp32.to(at::kDouble) - autocast.to(at::kDouble)).abs().max().item<double>(), scale / 64);
    EXPECT_TRUE(torch::equal(onBf16, autocast)) << "bf16 arithmetic: the module's forward";
    EXPECT_TRUE(torch::equal(unfused, autocast)) << "no fast paths: the module's forward";
}

// A fused layer pair against its two calls apart (`together`, `apart`: forward(conv, x, p, gen,
// flattenNext, training)), for each arithmetic of a bf16 lane's convolution (DEVICERACE_BF16_CONV
// fp32 and bf16) and outside a bf16 lane, in training (dropout p 0 and 0.25, either output layout)
// and in evaluation: outputs, input, weight and bias gradients and the next dropout draw the same
// bit for bit; in training the output's node takes the convolution node's output directly
// (`firstNode`: the output's node, `input`: the name the next edge must hold).
template <class F, class G>
void expectFusedAsApart(F&& apart, G&& together, std::optional<std::int64_t> poolSize) {
    struct Out {
        torch::Tensor out, dx, dw, db;
        std::uint64_t nextDraw;
        std::string edge;
    };
    const auto pass = [](torch::nn::Conv2d& conv, const torch::Tensor& input, auto&& forward, double p,
                         bool flattenNext, bool training, bool bf16) {
        conv->zero_grad();
        auto gen = at::detail::createCPUGenerator(5);
        auto x = input.clone(at::MemoryFormat::ChannelsLast).requires_grad_(training);
        std::optional<torch::NoGradGuard> noGrad;
        if (!training) {
            noGrad.emplace();
        }
        at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
        at::autocast::set_autocast_enabled(at::kCPU, bf16);
        auto out = forward(*conv, x, p, gen, flattenNext, training);
        at::autocast::set_autocast_enabled(at::kCPU, false);
        at::autocast::clear_cache();
        Out r{out.detach().contiguous(), {}, {}, {}, dropoutSeed(gen), ""};
        if (training) {
            r.edge = out.grad_fn()->name();
            if (const auto& next = out.grad_fn()->next_edges(); !next.empty() && next[0].function) {
                r.edge += " <- " + next[0].function->name();
            }
            auto weight = torch::linspace(-1.0, 2.0, out.numel()).view(out.sizes()).to(out.scalar_type());
            (out * weight).sum().backward();
            r.dx = x.grad().clone();
            r.dw = conv->weight.grad().clone();
            r.db = conv->bias.grad().clone();
        }
        return r;
    };
    for (const char* arith : {"fp32", "bf16"}) {
        Bf16ConvMode mode(arith);
        for (const bool bf16 : {true, false}) {
            for (const bool training : {true, false}) {
                for (const double p : poolSize ? std::vector<double>{0.0, 0.25} : std::vector<double>{0.0}) {
                    for (const bool flattenNext :
                         poolSize ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
                        auto conv = makeConv(6, 16, 3, 1, true, 0);
                        auto gen = at::detail::createCPUGenerator(23);
                        const auto x = channelsLastStrided(torch::randn({3, 6, 11, 13}, gen));
                        const auto a = pass(conv, x, apart, p, flattenNext, training, bf16);
                        const auto t = pass(conv, x, together, p, flattenNext, training, bf16);
                        const auto what = ::testing::Message()
                                          << arith << " arithmetic" << (bf16 ? ", bf16 lane" : ", fp32 lane")
                                          << (training ? ", training" : ", evaluation") << ", p " << p
                                          << (flattenNext ? ", NCHW out" : "");
                        EXPECT_EQ(t.out.scalar_type(), bf16 ? at::kBFloat16 : at::kFloat) << what;
                        EXPECT_TRUE(torch::equal(a.out, t.out)) << what;
                        EXPECT_EQ(a.nextDraw, t.nextDraw) << what;
                        if (training) {
                            EXPECT_TRUE(torch::equal(a.dx, t.dx)) << what;
                            EXPECT_TRUE(torch::equal(a.dw, t.dw)) << what;
                            EXPECT_TRUE(torch::equal(a.db, t.db)) << what;
                            EXPECT_GT(t.dw.abs().sum().item().toDouble(), 0.0) << what;
                            // no cast node between the two: the convolution's node, or ATen's relu on it
                            const bool direct = t.edge.find("ConvTunedWeightGrad") != std::string::npos &&
                                                t.edge.find("ToCopy") == std::string::npos;
                            EXPECT_TRUE(direct) << t.edge << ", " << what;
                            if (!poolSize && bf16 && std::string_view(arith) == "fp32") {
                                EXPECT_EQ(t.edge.find("Relu"), std::string::npos)
                                    << "the node's own relu: " << t.edge << ", " << what;
                            }
                        }
                    }
                }
            }
        }
    }
}

// A bf16 lane's convolution followed by the fused relu + pool + dropout (convolveReluPool): where
// the convolution runs on its bf16 values in fp32, its fp32 output goes to the pool unrounded and
// the pool rounds it as it reads it; the values are those of the rounded output pooled.
TEST(ConvWeightGrad, ABf16ConvolutionHandsItsFp32OutputToThePoolUnrounded) {
    if (!nodeTakesBf16()) {
        GTEST_SKIP() << "bf16 units without the AVX-512 BF16 kernel: a bf16 lane's convolutions are autocast's";
    }
    expectFusedAsApart(
        [](torch::nn::Conv2dImpl& conv, const torch::Tensor& x, double p, at::Generator& gen, bool flattenNext,
           bool training) {
            return reluMaxPoolDropout(convolve(conv, x, true), p, training, gen, true, true, flattenNext);
        },
        [](torch::nn::Conv2dImpl& conv, const torch::Tensor& x, double p, at::Generator& gen, bool flattenNext,
           bool training) { return convolveReluPool(conv, x, true, p, training, gen, true, true, flattenNext); },
        2);
}

// A bf16 lane's convolution followed by a relu (convolveRelu): where the convolution runs on its
// bf16 values in fp32, the rounding and the relu are the node's one pass, and the relu's gradient
// its widening's; the values are autocast's output and ATen's relu_.
TEST(ConvWeightGrad, ABf16ConvolutionRoundsAndRelusInOnePass) {
    if (!nodeTakesBf16()) {
        GTEST_SKIP() << "bf16 units without the AVX-512 BF16 kernel: a bf16 lane's convolutions are autocast's";
    }
    expectFusedAsApart([](torch::nn::Conv2dImpl& conv, const torch::Tensor& x, double, at::Generator&, bool,
                          bool) { return convolve(conv, x, true).relu_(); },
                       [](torch::nn::Conv2dImpl& conv, const torch::Tensor& x, double, at::Generator&, bool, bool) {
                           return convolveRelu(conv, x, true);
                       },
                       std::nullopt);
}

// The arithmetic of a bf16 lane's convolution is timed per shape only where this CPU's bf16 peak
// measured below its fp32 one, kept in the machine's file beside the weight-gradient picks, and
// followed from there.
TEST(ConvWeightGrad, ABf16ConvolutionsArithmeticIsTimedOnlyWhereBf16IsSlower) {
    if (!devicerace::detail::cpu::haveAvx512Bf16Gemm()) {
        GTEST_SKIP() << "this CPU has no AVX-512 BF16: its bf16 convolutions are not timed "
                        "(ABf16ConvolutionWithoutBf16UnitsRunsInFp32Untimed)";
    }
    const ChoiceDir dir;
    at::set_num_threads(1);
    using devicerace::Precision;
    if (devicerace::cpuPeakFlops(Precision::Fp32, 1, true).busy ||
        devicerace::cpuPeakFlops(Precision::Bf16, 1, true).busy) {
        GTEST_SKIP() << "other work shared the cores, so no peak was kept";
    }
    const double fp32 = devicerace::cpuPeakFlops(Precision::Fp32, 1).flopsPerSec;
    const auto setBf16Peak = [&](double figure) { // as a CPU with faster or slower bf16 units leaves it
        const auto file = dir.path / "peaks.json";
        nlohmann::json j;
        {
            std::ifstream in(file);
            j = nlohmann::json::parse(in);
        }
        for (auto& [key, entry] : j["peaks"].items()) {
            if (key.find("|bf16|") != std::string::npos) {
                entry["flops_per_sec"] = figure;
            }
        }
        std::ofstream(file) << j.dump();
        forgetConvChoices();
    };
    const auto arithmeticKeys = [] {
        std::vector<std::string> keys;
        if (std::filesystem::exists(convChoiceFile())) {
            const auto file = ChoiceDir::read(); // (alive through the loop)
            for (const auto& [key, pick] : file["choices"].items()) {
                if (key.find("|arithmetic") != std::string::npos) {
                    keys.push_back(key);
                }
            }
        }
        return keys;
    };
    auto conv = makeConv(16, 16, 3);
    auto gen = at::detail::createCPUGenerator(17);
    const auto input = channelsLastStrided(torch::randn({8, 16, 12, 12}, gen));
    Grads onBf16, widened;
    {
        Bf16ConvMode mode("bf16");
        onBf16 = runBf16(conv, input, true);
    }
    {
        Bf16ConvMode mode("fp32");
        widened = runBf16(conv, input, true);
    }
    ASSERT_FALSE(torch::equal(onBf16.dw, widened.dw)) << "the two arithmetics must be told apart";
    setBf16Peak(fp32 * 3);
    EXPECT_TRUE(torch::equal(runBf16(conv, input, true).dw, onBf16.dw)) << "faster bf16 units: bf16, untimed";
    EXPECT_TRUE(arithmeticKeys().empty());
    setBf16Peak(fp32 / 2);
    runBf16(conv, input, true); // times both
    const auto keys = arithmeticKeys();
    ASSERT_EQ(keys.size(), 1u) << ChoiceDir::read().dump();
    EXPECT_NE(keys[0].find("n8 c16->16 12x12 k3x3 pad 1x1 stride 1x1 bf16|1 threads|arithmetic"), std::string::npos)
        << keys[0];
    for (const char* pick : {"fp32", "bf16"}) {
        auto file = ChoiceDir::read();
        file["choices"][keys[0]] = pick;
        ChoiceDir::write(file);
        forgetConvChoices();
        const auto dw = runBf16(conv, input, true).dw;
        EXPECT_TRUE(torch::equal(dw, pick == std::string("fp32") ? widened.dw : onBf16.dw)) << "the file said " << pick;
    }
}

// Without bf16 units (AMX or AVX-512 BF16) a bf16 lane's convolution runs on its bf16 values in
// fp32, untimed: oneDNN's bf16 convolution is an emulation there (a fashion-cnn step ~12x slower
// than fp32's on an AMD EPYC Zen 3). The same values as that arithmetic forced, and no arithmetic
// choice in the machine's file.
TEST(ConvWeightGrad, ABf16ConvolutionWithoutBf16UnitsRunsInFp32Untimed) {
    if (!devicerace::detail::readHostCpu().bf16Units.empty()) {
        GTEST_SKIP() << "this CPU has bf16 units: ABf16ConvolutionsArithmeticIsTimedOnlyWhereBf16IsSlower";
    }
    const ChoiceDir dir;
    auto conv = makeConv(16, 16, 3, 1, true);
    auto gen = at::detail::createCPUGenerator(29);
    const auto input = channelsLastStrided(torch::randn({4, 16, 10, 10}, gen));
    Grads widened;
    {
        Bf16ConvMode mode("fp32");
        widened = runBf16(conv, input, true);
    }
    forgetConvChoices();
    const auto chosen = runBf16(conv, input, true);
    EXPECT_TRUE(torch::equal(chosen.out, widened.out));
    EXPECT_TRUE(torch::equal(chosen.dw, widened.dw));
    EXPECT_TRUE(torch::equal(chosen.dx, widened.dx));
    if (std::filesystem::exists(convChoiceFile())) {
        for (const auto& [key, pick] : ChoiceDir::read()["choices"].items()) {
            EXPECT_EQ(key.find("|arithmetic"), std::string::npos) << key;
        }
    }
}
