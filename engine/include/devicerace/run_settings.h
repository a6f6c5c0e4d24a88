#pragma once
/// What a lane shares with its race (resolved from the RaceSpec), and a data-parallel rank's
/// place in its group: plain values, thread-safe to copy. Includes nothing above the data and
/// lane-spec headers, so the training loop's context needs no Lane.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "devicerace/dataset.h"
#include "devicerace/lane_spec.h"

namespace devicerace {

/// One rank of a data-parallel lane, as its parent configured it (the worker protocol's
/// `config.dist`); see docs/PARALLEL.md.
struct DistConfig {
    int rank = 0;
    int world = 1;
    std::string backend = "gloo"; // gloo | nccl
    std::string storeHost;        // rank 0: "" (it serves the store); the others: where it listens
    int storePort = 0;
    std::string bindHost;       // the address Gloo binds ("127.0.0.1": every rank on one machine)
    double timeoutSeconds = 60; // rendezvous: every rank must have joined by then
    bool fixedGlobalBatch = false;
    std::shared_ptr<void> store; // rank 0's worker: the TCPStore it serves, kept for the lane's life
};

/// Settings a lane shares with its race (resolved from the RaceSpec).
struct LaneRunSettings {
    std::string workload;
    /// The data a thread lane trains on. Worker lanes resolve their own data where they run
    /// from the fields below (the remote machine may hold data this one lacks).
    std::shared_ptr<const ImageDataset> data;
    std::optional<DataMode> dataMode;
    std::string dataDir;
    std::optional<std::int64_t> trainLimit;
    std::optional<std::int64_t> testLimit;
    std::optional<int> epochs;
    std::optional<std::int64_t> steps;
    std::optional<double> targetAccuracy;
    std::optional<double> targetLoss; // takes the place of targetAccuracy when set
    std::uint64_t seed = 0;
    std::int64_t evalEverySteps = 0;
    std::int64_t warmupSteps = 20;
    double reportIntervalSeconds = 0.1; // metric samples at most this often
    /// Fault injection for tests of lane isolation: throw at this step (0: never).
    std::int64_t failAtStep = 0;
    /// A worker process may run fault=abort|segv|exit|hang (it is alone in its process); throw and
    /// slow-data run anywhere.
    bool allowProcessFaults = false;
    /// The race's plan (WaitPolicy::spinInLaneProcesses): the lane's local processes start with
    /// libgomp's default, spinning waits. Not sent to workers.
    bool spinInLaneProcesses = false;
    /// Script lanes: the user's command, and the CPUs its processes may use on this machine
    /// (empty: the first `threads` CPUs wherever it runs).
    std::vector<std::string> command;
    std::vector<int> cpus;
    /// Set in the workers of a data-parallel lane: this process is one rank of it.
    std::optional<DistConfig> dist;
};

} // namespace devicerace
