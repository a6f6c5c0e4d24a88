// A race's summary counts only its own workload's parameters: counting builds the network, and
// building all 13 (ResNet-50's initialisation most of it) cost every race ~0.4 s of CPU at its
// end. ctest runs each test in a fresh process; run by hand after other tests, it compares
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
    for (const auto& name : countedSince(before)) {
        EXPECT_EQ(name, "char-gpt") << "a char-gpt race's summary built " << name << "'s network";
    }
}

TEST(WorkloadCounts, AnUnknownWorkloadHasNoTokensAndCountsNothing) {
    // A recording from another version may name a workload this build does not know.
    const auto before = devicerace::detail::countedWorkloadNames();
    EXPECT_EQ(tokensPerSampleOf("no-such-net"), 0);
    EXPECT_EQ(tokensPerSampleOf("fashion-mlp"), 0);
    for (const auto& name : countedSince(before)) {
        EXPECT_EQ(name, "fashion-mlp");
    }
}

TEST(WorkloadCounts, TheListCountsEveryWorkload) {
    const auto& all = workloads();
    EXPECT_EQ(devicerace::detail::countedWorkloadNames().size(), all.size());
}
