// The step-time breakdown's marks (train/step_timer.h).
#include "train/step_timer.h"

#include <algorithm>

#include <c10/cuda/CUDAStream.h>

#include <cstdlib>
#include <cstring>

#include "devicerace/environment.h"

namespace devicerace::detail {

const char* phaseName(Phase p) {
    switch (p) {
    case Phase::Data: return "data";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Communication: return "communication";
    case Phase::Optimizer: return "optimizer";
    case Phase::Compute: return "compute";
    case Phase::Other: return "other";
    }
    return "?";
}

namespace {
// Timed steps kept per report interval on a GPU (their events are read at the report).
constexpr std::size_t kMaxCudaSteps = 64;
} // namespace

// CUDA: one event at the start of each timed step and one per mark, reused across intervals.
struct StepTimer::CudaMarks {
    struct Mark {
        Phase phase;
        std::size_t event;
    };
    std::vector<std::unique_ptr<c10::cuda::CUDAEvent>> events;
    std::size_t used = 0;
    std::vector<std::vector<Mark>> steps; // per timed step: its marks (event 0 of each is the start)
    std::vector<std::size_t> starts;

    std::size_t record() {
        if (used == events.size()) {
            events.push_back(std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault)); // with timing
        }
        events[used]->record(c10::cuda::getCurrentCUDAStream());
        return used++;
    }
};

StepTimer::StepTimer(torch::Device device, std::int64_t every) : m_device(device), m_every(every) {
    if (const char* env = devicerace::environmentSwitch("DEVICERACE_BREAKDOWN"); env && std::strcmp(env, "0") == 0) {
        m_every = 0;
    }
    if (m_device.is_cuda()) {
        m_cuda = std::make_unique<CudaMarks>();
    }
}

StepTimer::~StepTimer() = default;

void StepTimer::begin(std::int64_t step) {
    m_active = m_every > 0 && step % m_every == 0 && (!m_cuda || m_cuda->steps.size() < kMaxCudaSteps);
    if (!m_active) {
        return;
    }
    if (m_cuda) {
        m_cuda->starts.push_back(m_cuda->record());
        m_cuda->steps.emplace_back();
    } else {
        m_dataFrom = ThreadTime::now();
        m_last = std::chrono::steady_clock::now();
    }
}

void StepTimer::mark(Phase finished) {
    if (!m_active) {
        return;
    }
    if (m_cuda) {
        m_cuda->steps.back().push_back({finished, m_cuda->record()});
        return;
    }
    if (finished == Phase::Data && m_dataFrom.valid) {
        const auto thread = ThreadTime::now();
        markAt(finished, std::chrono::steady_clock::now(), &thread);
        return;
    }
    markAt(finished, std::chrono::steady_clock::now());
}

void StepTimer::markAt(Phase finished, std::chrono::steady_clock::time_point at, const ThreadTime* threadAt) {
    if (!m_active || m_cuda) {
        mark(finished);
        return;
    }
    at = std::max(at, m_last);
    double seconds = std::chrono::duration<double>(at - m_last).count();
    if (finished == Phase::Data && threadAt) {
        seconds -= preemptedSeconds(seconds, m_dataFrom, *threadAt); // left to "other"
    }
    // A data mark's reading starts the next stretch of data (the fused steps convert the batch
    // after the trainer's mark); after any other phase there is none.
    m_dataFrom = finished == Phase::Data && threadAt ? *threadAt : ThreadTime{};
    m_sum[static_cast<std::size_t>(finished)] += seconds;
    m_last = at;
}

void StepTimer::end() {
    if (!m_active) {
        return;
    }
    mark(Phase::Other);
    if (!m_cuda) {
        ++m_timed;
    }
    m_active = false;
}

std::map<std::string, double> StepTimer::take(double stepSeconds) {
    m_active = false;
    if (m_cuda) {
        for (std::size_t s = 0; s < m_cuda->steps.size(); ++s) {
            const auto& marks = m_cuda->steps[s];
            if (marks.empty() || marks.back().phase != Phase::Other) {
                continue; // a step cut short (a throw): not counted
            }
            std::size_t prev = m_cuda->starts[s];
            for (const auto& m : marks) {
                m_sum[static_cast<std::size_t>(m.phase)] +=
                    m_cuda->events[prev]->elapsed_time(*m_cuda->events[m.event]) / 1000.0;
                prev = m.event;
            }
            ++m_timed;
        }
        m_cuda->steps.clear();
        m_cuda->starts.clear();
        m_cuda->used = 0;
    }
    std::map<std::string, double> out;
    if (m_timed == 0) {
        m_sum.fill(0);
        return out;
    }
    double measured = 0;
    for (std::size_t i = 0; i < kPhases; ++i) {
        const auto phase = static_cast<Phase>(i);
        if (phase == Phase::Other || m_sum[i] <= 0) {
            continue;
        }
        const double perStep = m_sum[i] / static_cast<double>(m_timed);
        out[phaseName(phase)] = perStep;
        measured += perStep;
    }
    out[phaseName(Phase::Other)] = std::max(0.0, stepSeconds - measured);
    m_sum.fill(0);
    m_timed = 0;
    return out;
}

} // namespace devicerace::detail
