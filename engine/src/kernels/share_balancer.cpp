// Work shares that follow each thread's measured speed (see share_balancer.h).
#include "kernels/share_balancer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace devicerace::detail {

void ShareBalancer::resize(std::size_t workers) {
    if (m_fractions.size() != workers) {
        m_fractions.assign(workers, 1.0 / static_cast<double>(std::max<std::size_t>(1, workers)));
    }
}

void ShareBalancer::set(std::span<const double> fractions) { m_fractions.assign(fractions.begin(), fractions.end()); }

void ShareBalancer::split(std::int64_t items, std::int64_t workers, std::int64_t granule, std::int64_t minShare,
                          std::vector<std::int64_t>& bounds) {
    if (workers <= 1) {
        // One worker (an epoch's short last batch): the whole, and what was learnt for several
        // workers stays for the next full batch.
        bounds.assign({0, items});
        return;
    }
    granule = std::max<std::int64_t>(1, granule);
    resize(static_cast<std::size_t>(workers));
    bounds.assign(static_cast<std::size_t>(workers + 1), 0);
    // Room for every share's minimum, where the items allow it.
    minShare = std::clamp<std::int64_t>(minShare, 0, items / workers);
    double cumulative = 0;
    for (std::int64_t w = 1; w < workers; ++w) {
        cumulative += m_fractions[static_cast<std::size_t>(w - 1)];
        auto cut = static_cast<std::int64_t>(
                       std::llround(static_cast<double>(items) * cumulative / static_cast<double>(granule))) *
                   granule;
        const auto lowest = bounds[static_cast<std::size_t>(w - 1)] + minShare;
        const auto highest = items - (workers - w) * minShare;
        // Round the limits onto granules inward when that keeps them in order.
        const auto lowestCut = std::min(highest, (lowest + granule - 1) / granule * granule);
        const auto highestCut = std::max(lowestCut, highest / granule * granule);
        bounds[static_cast<std::size_t>(w)] = std::clamp(cut, lowestCut, highestCut);
    }
    bounds[static_cast<std::size_t>(workers)] = items;
}

void ShareBalancer::learn(std::span<const double> shares, std::span<const double> seconds) {
    const auto workers = shares.size();
    if (workers < 2 || seconds.size() != workers) {
        return;
    }
    resize(workers);
    // Speed: work done per second. A worker that did nothing or took no measurable time says
    // nothing about its speed this step.
    double total = 0;
    for (std::size_t w = 0; w < workers; ++w) {
        if (!(shares[w] > 0) || !(seconds[w] > 0) || !std::isfinite(seconds[w])) {
            return;
        }
        total += shares[w] / seconds[w];
    }
    // The new fractions still sum to 1 (both the old ones and the targets do; with 2 workers the
    // clamp keeps that, with more it may move the sum by a little, renormalised below). Then any under
    // the floor is raised to it, taking the difference from the others above it in proportion.
    const double floor = kFloor / static_cast<double>(workers);
    double lacking = 0, spare = 0;
    for (std::size_t w = 0; w < workers; ++w) {
        // A step where a worker was preempted for milliseconds says little about its core's
        // speed: one step's target is taken no further than kStepReach from the fractions.
        auto& f = m_fractions[w];
        const double target = std::clamp(shares[w] / seconds[w] / total, f - kStepReach, f + kStepReach);
        f += m_smoothing * (target - f);
        if (f < floor) {
            lacking += floor - f;
            f = floor;
        } else {
            spare += f - floor;
        }
    }
    if (lacking > 0 && spare > 0) {
        for (auto& f : m_fractions) {
            if (f > floor) {
                f -= (f - floor) * lacking / spare;
            }
        }
    }
    const double sum = std::accumulate(m_fractions.begin(), m_fractions.end(), 0.0);
    for (auto& f : m_fractions) {
        f /= sum;
    }
}

} // namespace devicerace::detail
