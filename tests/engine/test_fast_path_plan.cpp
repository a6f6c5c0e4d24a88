// The one fast-path decision (kernels/fast_paths.h): what fused=, the device, the precision and
// the layout give a lane, and what each benchmark switch takes away (that lever alone).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "devicerace/lane_spec.h"
#include "devices/cpu_info.h"
#include "kernels/bf16_gemm.h"
#include "kernels/fast_paths.h"

using namespace devicerace;
using detail::decideFastPaths;
using detail::FastPaths;

namespace {

FastPaths cpuLane(const std::string& keys, bool channelsLast = true, bool fusedLstm = true) {
    return decideFastPaths(parseLaneSpec("cpu" + keys), "cpu", channelsLast, fusedLstm);
}

const char* const kSwitches[] = {"DEVICERACE_DENSE_STEP",  "DEVICERACE_FUSED_NORM",         "DEVICERACE_FUSED_CELL",
                                 "DEVICERACE_TOKEN_LSTM",  "DEVICERACE_CONV_WGRAD",         "DEVICERACE_KEEP_DENORMALS",
                                 "DEVICERACE_KEEP_MALLOC", "DEVICERACE_TEST_HASHED_DROPOUT"};

class FastPathPlan : public ::testing::Test {
protected:
    void SetUp() override {
        for (const char* name : kSwitches) {
            ::unsetenv(name);
        }
    }
    void TearDown() override { SetUp(); }
};

} // namespace

TEST_F(FastPathPlan, FusedFalseIsPlainLibTorch) {
    const auto plain = cpuLane(",fused=false");
    EXPECT_FALSE(plain.any()) << plain.names();
    EXPECT_EQ(plain.names(), "");
    EXPECT_FALSE(decideFastPaths(parseLaneSpec("cuda:0,fused=false"), "cuda:0", false, true).any());
}

TEST_F(FastPathPlan, ACpuLaneTakesEveryLeverThatApplies) {
    EXPECT_EQ(cpuLane("").names(), "optimizer,dense-step,gpt-step,relu-pool,norm-relu,conv-wgrad,token-lstm,"
                                   "hashed-dropout,host-cache,flush-denormals");
    // lstm=cells: the one-pass cells instead of the token LSTM.
    const auto cells = cpuLane("", true, false);
    EXPECT_TRUE(cells.onePassCells);
    EXPECT_FALSE(cells.tokenLstm);
    // NCHW: no one-pass batch norm, no tuned weight gradient (both need channels_last).
    const auto nchw = cpuLane("", false);
    EXPECT_FALSE(nchw.normRelu);
    EXPECT_FALSE(nchw.convWeightGrad);
    EXPECT_TRUE(nchw.reluPool);
}

TEST_F(FastPathPlan, Bf16KeepsTheLeversThatHaveABf16Path) {
    const auto bf16 = cpuLane(",precision=bf16");
    EXPECT_TRUE(bf16.denseStep && bf16.gptStep && bf16.reluPool && bf16.normRelu && bf16.optimizer);
    // the dense layers of its autograd networks, each GEMM shape on its fastest route
    EXPECT_TRUE(bf16.bf16Dense);
    EXPECT_FALSE(cpuLane("").bf16Dense) << "fp32 lanes' dense layers are the module's";
    ::setenv("DEVICERACE_BF16_DENSE", "0", 1);
    EXPECT_FALSE(cpuLane(",precision=bf16").bf16Dense);
    ::unsetenv("DEVICERACE_BF16_DENSE");
    // the convolutions' node: the weight gradients by the AVX-512 BF16 kernel, or, without bf16
    // units, the convolutions on their bf16 values in fp32
    EXPECT_EQ(bf16.convWeightGrad,
              devicerace::detail::cpu::haveAvx512Bf16Gemm() || devicerace::detail::readHostCpu().bf16Units.empty());
    EXPECT_FALSE(bf16.tokenLstm);
    EXPECT_FALSE(cpuLane(",precision=bf16", true, false).onePassCells);
}

TEST_F(FastPathPlan, ACudaLaneTakesTheOptimizerOnly) {
    const auto cuda = decideFastPaths(parseLaneSpec("cuda:0"), "cuda:0", true, true);
    EXPECT_EQ(cuda.names(), "optimizer");
}

TEST_F(FastPathPlan, EachSwitchTurnsOffItsOwnLeverAlone) {
    const FastPaths all = cpuLane("");
    struct Case {
        const char* name;
        const char* value;
        bool FastPaths::*lever;
    };
    const Case cases[] = {
        {"DEVICERACE_DENSE_STEP", "0", &FastPaths::denseStep},
        {"DEVICERACE_FUSED_NORM", "0", &FastPaths::normRelu},
        {"DEVICERACE_TOKEN_LSTM", "0", &FastPaths::tokenLstm},
        {"DEVICERACE_CONV_WGRAD", "0", &FastPaths::convWeightGrad},
        {"DEVICERACE_KEEP_DENORMALS", "1", &FastPaths::flushDenormals},
        {"DEVICERACE_KEEP_MALLOC", "1", &FastPaths::hostCache},
    };
    for (const auto& c : cases) {
        ::setenv(c.name, c.value, 1);
        FastPaths want = all;
        want.*c.lever = false;
        EXPECT_EQ(cpuLane("").names(), want.names()) << c.name;
        ::unsetenv(c.name);
    }
    ::setenv("DEVICERACE_FUSED_CELL", "0", 1);
    EXPECT_FALSE(cpuLane("", true, false).onePassCells);
    // DEVICERACE_CONV_WGRAD=gemm picks a path, it does not turn the lever off.
    ::setenv("DEVICERACE_CONV_WGRAD", "gemm", 1);
    EXPECT_TRUE(cpuLane("").convWeightGrad);
}

TEST_F(FastPathPlan, TheTestSwitchGivesPlainLanesTheHashedMasksOnly) {
    ::setenv("DEVICERACE_TEST_HASHED_DROPOUT", "1", 1);
    EXPECT_EQ(cpuLane(",fused=false").names(), "hashed-dropout");
    EXPECT_FALSE(decideFastPaths(parseLaneSpec("cuda:0,fused=false"), "cuda:0", false, true).any());
}
