// The shares of a step's work between a lane's threads (engine kernels/share_balancer.h): even at
// first, then following each worker's measured speed until they finish together, in whole
// granules, never starving a worker. Simulated timings: no clock is read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/share_balancer.h"

using devicerace::detail::ShareBalancer;

namespace {

// One simulated region: worker w takes fixed[w] + perItem[w] * its items (seconds).
std::vector<double> finishTimes(const std::vector<std::int64_t>& bounds, const std::vector<double>& fixed,
                                const std::vector<double>& perItem) {
    std::vector<double> t;
    for (std::size_t w = 0; w + 1 < bounds.size(); ++w) {
        t.push_back(fixed[w] + perItem[w] * static_cast<double>(bounds[w + 1] - bounds[w]));
    }
    return t;
}

std::vector<double> sharesOf(const std::vector<std::int64_t>& bounds) {
    std::vector<double> s;
    for (std::size_t w = 0; w + 1 < bounds.size(); ++w) {
        s.push_back(static_cast<double>(bounds[w + 1] - bounds[w]) / static_cast<double>(bounds.back()));
    }
    return s;
}

// Runs `steps` simulated regions of `items` and returns the last bounds.
std::vector<std::int64_t> settle(ShareBalancer& b, std::int64_t items, std::int64_t granule, std::int64_t minShare,
                                 const std::vector<double>& fixed, const std::vector<double>& perItem, int steps) {
    std::vector<std::int64_t> bounds;
    for (int i = 0; i < steps; ++i) {
        b.split(items, static_cast<std::int64_t>(fixed.size()), granule, minShare, bounds);
        b.learn(sharesOf(bounds), finishTimes(bounds, fixed, perItem));
    }
    b.split(items, static_cast<std::int64_t>(fixed.size()), granule, minShare, bounds);
    return bounds;
}

} // namespace

TEST(ShareBalancer, SplitsEvenlyBeforeItHasMeasuredAnything) {
    ShareBalancer b;
    std::vector<std::int64_t> bounds;
    b.split(128, 2, 8, 16, bounds);
    EXPECT_EQ(bounds, (std::vector<std::int64_t>{0, 64, 128}));
    b.split(48, 3, 8, 16, bounds);
    EXPECT_EQ(bounds, (std::vector<std::int64_t>{0, 16, 32, 48}));
    b.split(10, 1, 16, 16, bounds);
    EXPECT_EQ(bounds, (std::vector<std::int64_t>{0, 10}));
}

// One core 25% slower per item, and a fixed cost per share (a GEMM's packing) the same on both:
// the faster worker takes more until both finish within one granule's time of each other.
TEST(ShareBalancer, MovesWorkToTheFasterWorkerUntilBothFinishTogether) {
    ShareBalancer b;
    const std::vector<double> fixed{300e-6, 300e-6}, perItem{25e-6, 31.25e-6};
    const auto bounds = settle(b, 128, 8, 16, fixed, perItem, 200);
    const auto t = finishTimes(bounds, fixed, perItem);
    EXPECT_GT(bounds[1], 64) << "the faster worker 0 should hold more rows";
    EXPECT_EQ(bounds[1] % 8, 0);
    EXPECT_LE(std::abs(t[0] - t[1]), 8 * perItem[1]) << t[0] << " vs " << t[1];
    // Even shares would have left worker 0 waiting 64 * 6.25 us.
    EXPECT_LT(std::max(t[0], t[1]), 300e-6 + 64 * 31.25e-6);
    EXPECT_GT(b.fractions()[0], 0.52);
}

TEST(ShareBalancer, FollowsACoreThatSlowsDownThenRecovers) {
    ShareBalancer b;
    const std::vector<double> fixed{0, 0};
    auto bounds = settle(b, 512, 16, 16, fixed, {1e-6, 2e-6}, 200);
    EXPECT_GE(bounds[1], 320) << "worker 0 twice as fast: about two thirds of the units";
    bounds = settle(b, 512, 16, 16, fixed, {1e-6, 1e-6}, 200);
    EXPECT_EQ(bounds[1], 256) << "equal again: even shares";
}

// A single step where a worker stalled (preempted for 10 ms) moves the shares by at most
// smoothing x reach; a lasting stall cannot take a worker's share under the floor.
TEST(ShareBalancer, OneStallMovesTheSharesLittleAndNoWorkerIsStarved) {
    ShareBalancer b(0.1);
    std::vector<std::int64_t> bounds;
    b.split(128, 2, 8, 16, bounds);
    b.learn(sharesOf(bounds), std::vector<double>{2e-3, 12e-3});
    EXPECT_NEAR(b.fractions()[1], 0.5 - 0.1 * ShareBalancer::kStepReach, 1e-12);
    b.split(128, 2, 8, 16, bounds);
    EXPECT_EQ(bounds[1], 64) << "still even";
    for (int i = 0; i < 500; ++i) {
        b.split(128, 2, 8, 16, bounds);
        b.learn(sharesOf(bounds), std::vector<double>{1e-3, 1.0});
    }
    EXPECT_NEAR(b.fractions()[1], ShareBalancer::kFloor / 2, 1e-9);
    b.split(128, 2, 8, 16, bounds);
    EXPECT_EQ(bounds[2] - bounds[1], 16) << "the minimum share, as the rows allow";
}

TEST(ShareBalancer, CutsOnGranulesAndKeepsEveryMinimum) {
    ShareBalancer b;
    std::vector<std::int64_t> bounds;
    for (const double f0 : {0.01, 0.2, 0.33, 0.5, 0.61, 0.9, 0.99}) {
        b.set(std::vector<double>{f0, 1 - f0});
        for (const std::int64_t items : {32, 40, 48, 100, 128, 512, 785}) {
            b.split(items, 2, 8, 16, bounds);
            ASSERT_EQ(bounds.size(), 3u);
            EXPECT_EQ(bounds[0], 0);
            EXPECT_EQ(bounds[2], items);
            EXPECT_EQ(bounds[1] % 8, 0) << f0 << " of " << items;
            EXPECT_GE(bounds[1], 16) << f0 << " of " << items;
            EXPECT_GE(bounds[2] - bounds[1], 16) << f0 << " of " << items;
        }
    }
    // Three workers, fractions 0.6 / 0.3 / 0.1 of 128 rows in granules of 8, at least 16 each.
    b.set(std::vector<double>{0.6, 0.3, 0.1});
    b.split(128, 3, 8, 16, bounds);
    EXPECT_EQ(bounds, (std::vector<std::int64_t>{0, 80, 112, 128}));
}

// An epoch's short last batch runs on one worker: what was learnt for two stays.
TEST(ShareBalancer, AOneWorkerSplitKeepsWhatWasLearnt) {
    ShareBalancer b;
    b.set(std::vector<double>{0.6, 0.4});
    std::vector<std::int64_t> bounds;
    b.split(24, 1, 4, 16, bounds);
    EXPECT_EQ(bounds, (std::vector<std::int64_t>{0, 24}));
    EXPECT_EQ(b.fractions(), (std::vector<double>{0.6, 0.4}));
    b.split(128, 2, 4, 16, bounds);
    EXPECT_EQ(bounds[1], 76); // 0.6 of 128 on granules of 4
}

TEST(ShareBalancer, IgnoresStepsThatSayNothingAboutSpeed) {
    ShareBalancer b;
    std::vector<std::int64_t> bounds;
    b.split(128, 2, 8, 16, bounds);
    b.learn(sharesOf(bounds), std::vector<double>{0.0, 1e-3});
    b.learn(sharesOf(bounds), std::vector<double>{std::numeric_limits<double>::quiet_NaN(), 1e-3});
    b.learn(std::vector<double>{0.0, 1.0}, std::vector<double>{1e-3, 1e-3});
    b.learn(std::vector<double>{1.0}, std::vector<double>{1e-3});
    EXPECT_EQ(b.fractions(), (std::vector<double>{0.5, 0.5}));
}
