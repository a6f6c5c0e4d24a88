// Latency of a worker lane's samples: from the sample's creation in the worker (its wall_time)
// to its arrival where the window reads it (Lane::takeSamples polled every 66 ms, the window's
// RaceController period). Measured, never asserted.
// Usage: bench_worker_latency [LANE_SPEC] [STEPS]   e.g. "cpu,threads=1,isolate=process" 600
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "devicerace/race.h"

using namespace devicerace;

namespace {

// The window's poll period (ui/race_controller.cpp kPollMs).
constexpr auto kWindowPoll = std::chrono::milliseconds(66);

double now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

} // namespace

int main(int argc, char** argv) {
    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.lanes = {parseLaneSpec(argc > 1 ? argv[1] : "cpu,threads=1,isolate=process")};
    spec.steps = argc > 2 ? std::stoll(argv[2]) : 600;
    spec.trainLimit = 6000;
    spec.testLimit = 500;
    Race race(spec);
    race.start();
    std::vector<double> latency; // seconds, per sample
    while (!race.finished()) {
        std::this_thread::sleep_for(kWindowPoll);
        const double arrived = now();
        for (const auto& s : race.lanes()[0]->takeSamples()) {
            latency.push_back(arrived - s.wallTime);
        }
    }
    race.wait();
    const auto summary = race.summary().lanes.at(0);
    fmt::print("{}: {} samples, latency median {:.1f} ms, p95 {:.1f} ms, max {:.1f} ms ({}; {} samples/s)\n",
               spec.lanes[0].name.empty() ? argv[1] : spec.lanes[0].name, latency.size(),
               1000 * percentile(latency, 0.5), 1000 * percentile(latency, 0.95), 1000 * percentile(latency, 1.0),
               toString(summary.state), summary.samplesPerSec ? fmt::format("{:.0f}", *summary.samplesPerSec) : "-");
    return summary.state == LaneState::Finished ? 0 : 1;
}
