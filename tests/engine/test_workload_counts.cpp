// A race's summary builds no network: counting parameters builds one, and building all 13
// (ResNet-50's initialisation most of it) cost every race ~0.4 s of CPU at its end; the token
// count it needs is a fixed field. ctest runs each test in a fresh process; run by hand after other tests, it compares
// against what was already counted.
#include <gtest/gtest.h>

#include <algorithm>

#include "devicerace/race.h"
#include "devicerace/workload.h"
#include "models/models.h"

using namespace devicerace;

namespace {

std::vector<std::string> countedSince(const std::vector<std::string>& before) {
    std::vector<std::string> added;
    for (const auto& name : devicerace::detail::countedWorkloadNames()) {
        if (std::find(before.begin(), before.end(), name) == before.end()) {
            added.push_back(name);
        }
    }
    return added;
}

} // namespace

TEST(WorkloadCounts, ARaceSummaryCountsOnlyItsOwnWorkload) {
    const auto before = devicerace::detail::countedWorkloadNames();
    RaceSummary summary;
    summary.workload = "char-gpt";
    finishRaceSummary(summary);
    EXPECT_EQ(summary.tokensPerSample, 64);
    EXPECT_EQ(countedSince(before), std::vector<std::string>{}) << "a race's summary built a network";
}

TEST(WorkloadCounts, AnUnknownWorkloadHasNoTokensAndCountsNothing) {
    // A recording from another version may name a workload this build does not know.
    const auto before = devicerace::detail::countedWorkloadNames();
    EXPECT_EQ(tokensPerSampleOf("no-such-net"), 0);
    EXPECT_EQ(tokensPerSampleOf("fashion-mlp"), 0);
    EXPECT_EQ(tokensPerSampleOf("char-gpt-6l"), 256);
    EXPECT_EQ(countedSince(before), std::vector<std::string>{}) << "the token count built a network";
}

TEST(WorkloadCounts, TheListCountsEveryWorkload) {
    const auto& all = workloads();
    EXPECT_EQ(devicerace::detail::countedWorkloadNames().size(), all.size());
}
