#pragma once
// How a step's work is shared between a lane's intra-op threads when their cores do not run
// at the same speed. On a VM one vCPU can stay slower than another over whole races (a
// neighbour on the host, interrupts; docs/ENGINEERING.md, "Threads and OpenMP"), and an even
// split leaves the fast thread spinning for the difference at the end of every parallel region. The balancer learns
// each worker's speed from when it finished and moves work to the faster ones: at its fixed point every worker finishes
// at the same time, whatever part of a share's cost is fixed (a GEMM's packing) and whatever part grows with it.
// Torch-free; one instance per region kind.
#include <cstdint>
#include <span>
#include <vector>

namespace devicerace::detail {

class ShareBalancer {
public:
    /// `smoothing`: the weight of one step's measurement in the learnt fractions (0.1: a change
    /// in the cores' speeds is followed within ~10 steps, one noisy step moves them little).
    explicit ShareBalancer(double smoothing = 0.1) : m_smoothing(smoothing) {}

    /// Cuts `items` into `workers` consecutive shares: bounds[0] = 0, bounds[workers] = items,
    /// worker w takes [bounds[w], bounds[w + 1]). Each cut is a multiple of `granule`; each
    /// share holds at least `minShare` items where there are enough. The shares follow the
    /// fractions learnt so far (even before the first `learn`, or when `workers` changes to
    /// another count of several; one worker takes everything and leaves the fractions be).
    void split(std::int64_t items, std::int64_t workers, std::int64_t granule, std::int64_t minShare,
               std::vector<std::int64_t>& bounds);

    /// Learns from one region: worker w did `shares[w]` of its work (fractions summing to 1) and
    /// finished `seconds[w]` after the region began.
    void learn(std::span<const double> shares, std::span<const double> seconds);

    /// Sets the fractions (summing to 1), as a fixed split does before each step.
    void set(std::span<const double> fractions);

    /// Each worker's fraction of the work in the next split.
    const std::vector<double>& fractions() const { return m_fractions; }

    /// How far one step's measurement can pull a fraction (before smoothing).
    static constexpr double kStepReach = 0.05;

    /// No worker's fraction goes under this share of an even one (a core that stalls for a
    /// while is not starved of work for good).
    static constexpr double kFloor = 0.2;

private:
    void resize(std::size_t workers);

    double m_smoothing;
    std::vector<double> m_fractions;
};

} // namespace devicerace::detail
