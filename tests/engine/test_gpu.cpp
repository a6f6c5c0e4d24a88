// GPU checks: skip without a CUDA device, unless DEVICERACE_REQUIRE_CUDA=1 makes that a failure
// (set it on a GPU machine so a broken CUDA path cannot pass as a skip).
#include <gtest/gtest.h>

#include <cstdlib>

#include "devicerace/device_info.h"
#include "devicerace/race.h"

using namespace devicerace;

TEST(Gpu, CpuAgainstCuda0) {
    const auto& report = deviceReport();
    if (!report.cudaAvailable) {
        if (const char* req = std::getenv("DEVICERACE_REQUIRE_CUDA"); req && std::string(req) == "1") {
            FAIL() << "DEVICERACE_REQUIRE_CUDA=1 but CUDA is unavailable: " << report.cudaUnavailableReason;
        }
        GTEST_SKIP() << "no CUDA device: " << report.cudaUnavailableReason;
    }
    ASSERT_FALSE(report.gpus.empty());
    EXPECT_GT(report.gpus[0].totalMemoryBytes, 0u);
    RaceSpec spec;
    spec.workload = "fashion-cnn";
    spec.data = DataMode::Synthetic;
    LaneSpec cpu;
    cpu.threads = 1;
    LaneSpec gpu;
    gpu.device = "cuda:0";
    LaneSpec gpuBf16 = gpu;
    gpuBf16.precision = Precision::Bf16;
    spec.lanes = {cpu, gpu, gpuBf16};
    spec.steps = 60;
    spec.trainLimit = 4096;
    spec.testLimit = 1000;
    Race race(spec);
    race.start();
    race.wait();
    auto sum = race.summary();
    for (const auto& lane : sum.lanes) {
        EXPECT_EQ(lane.state, LaneState::Finished) << lane.name << ": " << lane.error;
        EXPECT_TRUE(lane.peakMemoryBytes.has_value());
    }
}
