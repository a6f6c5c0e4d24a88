#include "train/memory_tracker.h"

namespace devicerace::detail {

void CpuMemoryTracker::reportMemoryUsage(void*, int64_t allocSize, size_t, size_t, c10::Device device) {
    if (device.type() != c10::DeviceType::CPU) {
        return;
    }
    auto now = m_current.fetch_add(allocSize, std::memory_order_relaxed) + allocSize;
    auto peak = m_peak.load(std::memory_order_relaxed);
    while (now > peak && !m_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
}

CpuMemoryScope::CpuMemoryScope() : m_tracker(std::make_shared<CpuMemoryTracker>()) {
    m_guard.emplace(c10::DebugInfoKind::PROFILER_STATE, m_tracker);
}

} // namespace devicerace::detail
