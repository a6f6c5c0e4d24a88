// Picks a lane's kind from its spec (an ssh:// device, isolate=) and builds it.
#include "devicerace/lane.h"
#include "distributed/parallel_lane.h"
#include "lanes/thread_lane.h"
#include "workers/worker_lane.h"

namespace devicerace {

std::unique_ptr<Lane> makeLane(LaneSpec spec, LaneRunSettings settings) {
    if (laneKind(spec) == LaneKind::Thread) {
        return std::make_unique<ThreadLane>(std::move(spec), std::move(settings));
    }
    if (laneKind(spec) == LaneKind::Parallel) {
        return std::make_unique<ParallelLane>(std::move(spec), std::move(settings));
    }
    return std::make_unique<WorkerLane>(std::move(spec), std::move(settings));
}

} // namespace devicerace
