// fused=false is plain LibTorch: a lane that says so enters none of DeviceRace's own kernels or
// fast paths — the count kernels/fast_paths.h keeps at every place the engine enters one stays
// put — for every workload on the CPU, in fp32 and bf16, and says "plain LibTorch"; the same lane
// with fused=true enters them (so the count can fail).
#include <gtest/gtest.h>

#include <string>

#include "devicerace/dataset.h"
#include "devicerace/device_info.h"
#include "devicerace/lane.h"
#include "devicerace/workload.h"
#include "kernels/fast_paths.h"
#include "lane_runs.h"

using namespace devicerace;

namespace {

constexpr std::int64_t kBatch = 2;
constexpr std::int64_t kSteps = 2;

struct Counted {
    std::uint64_t entered = 0;
    LaneSummary summary;
};

Counted countedRun(const WorkloadInfo& w, const std::string& spec) {
    auto data = syntheticDataset(w.input, w.inputShape, w.classes, w.vocabulary, kBatch * 2, kBatch);
    const auto before = detail::fastPathsEntered();
    auto run = test::runEveryStep(w.name, parseLaneSpec(spec), data, kSteps, 3);
    return {detail::fastPathsEntered() - before, run.summary};
}

class PlainLibTorch : public ::testing::TestWithParam<std::string> {};

} // namespace

TEST_P(PlainLibTorch, AFusedFalseLaneEntersNoFastPath) {
    const auto& w = findWorkload(GetParam());
    const std::string base = "cpu,threads=2,batch=" + std::to_string(kBatch);
    for (const char* precision : {"fp32", "bf16"}) {
        if (w.hasLstm && precision == std::string("bf16") && deviceReport().cpu.bf16Units.empty()) {
            continue; // refused (oneDNN has no bf16 LSTM without bf16 units: ResolveRace tests it)
        }
        const auto plain = countedRun(w, base + ",fused=false,precision=" + precision);
        ASSERT_EQ(plain.summary.state, LaneState::Finished) << plain.summary.error;
        EXPECT_EQ(plain.entered, 0u) << w.name << " " << precision << ": " << plain.summary.execution;
        EXPECT_NE(plain.summary.execution.find("plain LibTorch"), std::string::npos) << plain.summary.execution;
        EXPECT_NE(plain.summary.execution.find("torch::optim"), std::string::npos) << plain.summary.execution;
        EXPECT_EQ(plain.summary.execution.find("caching host allocator"), std::string::npos) << plain.summary.execution;
        EXPECT_EQ(plain.summary.execution.find("denormals flushed"), std::string::npos) << plain.summary.execution;
    }
    const auto fused = countedRun(w, base);
    ASSERT_EQ(fused.summary.state, LaneState::Finished) << fused.summary.error;
    EXPECT_GT(fused.entered, 0u) << fused.summary.execution;
    EXPECT_EQ(fused.summary.execution.find("plain LibTorch"), std::string::npos) << fused.summary.execution;
}

INSTANTIATE_TEST_SUITE_P(EveryWorkload, PlainLibTorch, ::testing::ValuesIn([] {
                             std::vector<std::string> names;
                             for (const auto& w : workloads()) {
                                 names.push_back(w.name);
                             }
                             return names;
                         }()),
                         [](const auto& info) {
                             std::string n = info.param;
                             std::erase(n, '-');
                             return n;
                         });
