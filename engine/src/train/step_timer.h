#pragma once
// Where a training step's time goes: on a sample of steps, the trainer marks the end
// of each phase — data, forward, backward, communication, optimizer (or one "compute" phase for
// a replayed CUDA graph) — and a report turns the marks into seconds per step by phase. CPU
// lanes read the steady clock (their work is synchronous); CUDA lanes record timing events on
// the lane's stream and read them after the report's synchronisation, never mid-step. Lane
// thread only. On a CPU the data phase leaves out the time the lane thread spent preempted (the
// kernel ran something else in its place, train/thread_time.h): a lane sharing its cores is
// slower everywhere, not input-bound. That time is "other".
#include "train/thread_time.h"

#include <c10/cuda/CUDAEvent.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

namespace devicerace::detail {

enum class Phase { Data, Forward, Backward, Communication, Optimizer, Compute, Other };
inline constexpr std::size_t kPhases = 7;
const char* phaseName(Phase p);

class StepTimer {
public:
    /// Every `every`-th step is timed (0: none; DEVICERACE_BREAKDOWN=0 also turns it off).
    StepTimer(torch::Device device, std::int64_t every);
    ~StepTimer();

    /// Starts timing `step` when it is one of the sampled steps.
    void begin(std::int64_t step);
    /// The time since the previous mark belongs to `finished`.
    void mark(Phase finished);
    /// CPU: as mark, at a time read earlier (a phase that ended inside a parallel region, read
    /// there by the lane's own thread), with the lane thread's CPU time and switches read then
    /// (for the data phase; without them none of its time counts as preempted). CUDA lanes: mark.
    void markAt(Phase finished, std::chrono::steady_clock::time_point at, const ThreadTime* threadAt = nullptr);
    /// Ends the step (what is left since the last mark is "other").
    void end();
    bool active() const { return m_active; }

    /// Seconds per step by phase over the steps timed since the last take, given the interval's
    /// mean step time: "other" is what the measured phases leave of it (never negative). Empty
    /// when no step was timed. CUDA: call after the stream was synchronised.
    std::map<std::string, double> take(double stepSeconds);

private:
    struct CudaMarks;
    torch::Device m_device;
    std::int64_t m_every;
    bool m_active = false;
    // CPU: the current step's last mark, and the sums of the timed steps.
    std::chrono::steady_clock::time_point m_last;
    ThreadTime m_dataFrom; // the lane thread's CPU time and switches where data began (or invalid)
    std::array<double, kPhases> m_sum{};
    std::int64_t m_timed = 0;
    std::unique_ptr<CudaMarks> m_cuda;
};

} // namespace devicerace::detail
