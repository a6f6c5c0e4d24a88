#pragma once
// Per-lane peak CPU tensor memory: LibTorch's CPU allocator reports every allocation and
// free to a thread-local reporter; one is installed in each CPU lane's thread.
// Lane thread only (the reporter itself is thread-safe).
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <atomic>
#include <memory>
#include <optional>

namespace devicerace::detail {

class CpuMemoryTracker : public c10::MemoryReportingInfoBase {
public:
    void reportMemoryUsage(void* ptr, int64_t allocSize, size_t totalAllocated, size_t totalReserved,
                           c10::Device device) override;
    bool memoryProfilingEnabled() const override { return true; }
    std::int64_t current() const { return m_current.load(std::memory_order_relaxed); }
    std::int64_t peak() const { return m_peak.load(std::memory_order_relaxed); }

private:
    std::atomic<std::int64_t> m_current{0};
    std::atomic<std::int64_t> m_peak{0};
};

/// Installs a tracker for the calling thread for its lifetime.
class CpuMemoryScope {
public:
    CpuMemoryScope();
    const CpuMemoryTracker& tracker() const { return *m_tracker; }

private:
    std::shared_ptr<CpuMemoryTracker> m_tracker;
    std::optional<c10::DebugInfoGuard> m_guard;
};

} // namespace devicerace::detail
