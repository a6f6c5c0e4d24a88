#pragma once
/// A set of lanes run together (live) or one after another (fair). Thread-safe.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "devicerace/lane.h"
#include "devicerace/lane_spec.h"
#include "devicerace/race_plan.h"
#include "devicerace/race_summary.h"
#include "devicerace/workload.h"

namespace devicerace {

/// Builds one lane of a race (makeLane by default). Benchmarks and tests pass their own to race
/// synthetic sample sources through the same controller, recorder and window.
using LaneFactory = std::function<std::unique_ptr<Lane>(LaneSpec, LaneRunSettings)>;

class Race {
public:
    /// Builds the lanes resolveRace planned (nothing else decides); throws UsageError with the
    /// plan's first problem, or what a lane throws while it is built (a worker that cannot start).
    explicit Race(RaceSpec spec, LaneFactory factory = {});
    ~Race(); // stops and joins every lane

    const RaceSpec& spec() const; // resolved (plan().spec)
    const RacePlan& plan() const;
    const Dataset& dataset() const;      // the first lane's data
    const std::string& dataNote() const; // what the user should know about the data, or ""

    std::vector<Lane*> lanes() const;

    void start();
    void requestStop();
    void setPaused(bool paused);
    bool finished() const; // every lane in a terminal state
    void wait();
    RaceSummary summary() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

struct ResolvedData {
    std::shared_ptr<const Dataset> dataset;
    std::string note; // said to the user when the data is not what they might assume
};
/// The data a workload races on for a data mode (unset: real where the machine has it).
/// Throws UsageError / DataError.
ResolvedData resolveData(const WorkloadInfo& workload, std::optional<DataMode> mode, const std::string& dataDir,
                         std::optional<std::int64_t> trainLimit, std::optional<std::int64_t> testLimit);

} // namespace devicerace
