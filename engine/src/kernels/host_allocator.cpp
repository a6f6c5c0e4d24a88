// LibTorch's CPU allocator is plain posix_memalign: every activation, gradient and temporary
// of a CPU step is malloc'ed and freed again, and glibc hands large freed blocks back to the
// kernel (munmap past its mmap threshold, trimming of a thread arena's 64 MiB heaps), so the
// next step page-faults them in again. charlstm's fused LSTM frees a 38 MiB block every step:
// ~5,900 minor faults per step, a third of the lane's time in the kernel. Tuning glibc
// (mallopt) fixed it only where the block happened to fit an arena heap (strace: one run
// fixed, the same lane in another process not), so large blocks are cached here instead.
//
// Blocks of kMinCachedBytes and more are rounded up to kGranule and kept on a free list per
// size when freed, up to a cap; a training step asks for the same sizes every step, so from
// the second step on they are served from the lists. Smaller blocks are malloc'ed and freed as
// LibTorch's own allocator does (glibc serves them from its arenas). Every allocation and free
// is reported to the memory profiler as LibTorch's allocator does, so the lanes' peak-memory
// figures hold.
//
// A memory guard sits in front of every fresh large block (never one served from the lists):
// a block that would take the machine below a headroom of available memory (MemAvailable,
// /proc/meminfo, re-read at most every 10 ms, with the fresh blocks handed out since the read
// counted as used) is refused with HostOutOfMemory after the cached blocks were given back.
// The lane fails alone with its step and batch instead of the kernel's OOM killer ending the
// whole process (tests/cli/test_shutdown.py, docs/RELIABILITY.md).
#include "kernels/host_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "devicerace/environment.h"
#include "kernels/fast_paths.h"

namespace devicerace::detail {

namespace {

constexpr std::size_t kMinCachedBytes = std::size_t{256} << 10; // glibc's mmap territory
constexpr std::size_t kGranule = std::size_t{64} << 10;
constexpr std::size_t kMaxCapBytes = std::size_t{2} << 30;

std::size_t cacheCap() {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long pageSize = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || pageSize <= 0) {
        return std::size_t{512} << 20;
    }
    // An eighth of the machine's memory, at most 2 GiB.
    return std::min(kMaxCapBytes, static_cast<std::size_t>(pages) * static_cast<std::size_t>(pageSize) / 8);
}

// MemAvailable from /proc/meminfo in bytes (0 when unknown: no guard then).
std::size_t memAvailable() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) {
        return 0;
    }
    char line[256];
    std::size_t kb = 0;
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "MemAvailable:", 13) == 0) {
            kb = std::strtoull(line + 13, nullptr, 10);
            break;
        }
    }
    std::fclose(f);
    return kb * 1024;
}

std::size_t physicalMemory() {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long pageSize = sysconf(_SC_PAGESIZE);
    return pages > 0 && pageSize > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(pageSize) : 0;
}

std::string gib(std::size_t bytes) { return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9); }

// Whether this thread's large blocks are kept for its next step (a lane without the host-cache
// fast path: no, as LibTorch's own allocator; kernels/fast_paths.h).
thread_local bool t_cacheBlocks = true;
// Whether this thread is a lane's (or its OpenMP team's): a block served from the cache to it is
// one of the lane's fast paths (counted: kernels/fast_paths.h); to a calibration's thread, not.
thread_local bool t_laneThread = false;

std::mutex g_lastOomMutex;
HostOutOfMemory g_lastOom;

class CachingHostAllocator final : public c10::Allocator {
public:
    CachingHostAllocator() : m_cap(cacheCap()) {}

    c10::DataPtr allocate(std::size_t n) override {
        void* block = n < kMinCachedBytes ? c10::alloc_cpu(n) : takeLarge(n);
        if (block) {
            c10::profiledCPUMemoryReporter().New(block, n);
        }
        return {block, block, &CachingHostAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
    }

    // One deleter for every block (LibTorch's raw_allocate/raw_deallocate users need that).
    c10::DeleterFnPtr raw_deleter() const override { return &CachingHostAllocator::deleter; }

    void copy_data(void* dest, const void* src, std::size_t count) const override {
        default_copy_data(dest, src, count);
    }

    // A CPU lane starts using the cache.
    void hold() {
        std::lock_guard lock(m_mutex);
        ++m_lanes;
    }

    // A CPU lane is done; the last one out frees the cached blocks (lanes of one race that are
    // still training keep theirs).
    void drop() {
        std::vector<void*> blocks;
        {
            std::lock_guard lock(m_mutex);
            if (--m_lanes > 0) {
                return;
            }
            blocks = takeAllCached();
        }
        for (void* block : blocks) {
            c10::free_cpu(block);
        }
    }

    static CachingHostAllocator& instance() {
        // Never destroyed: tensors may outlive every static (LibTorch holds the pointer).
        static auto* allocator = new CachingHostAllocator();
        return *allocator;
    }

private:
    static void deleter(void* block) {
        if (block) {
            c10::profiledCPUMemoryReporter().Delete(block);
            instance().recycle(block);
        }
    }

    void* takeLarge(std::size_t n) {
        const std::size_t size = (n + kGranule - 1) / kGranule * kGranule;
        {
            std::lock_guard lock(m_mutex);
            auto it = t_cacheBlocks ? m_free.find(size) : m_free.end();
            if (it != m_free.end() && !it->second.empty()) {
                void* block = it->second.back();
                it->second.pop_back();
                m_cachedBytes -= size;
                m_inUse += size;
                if (t_laneThread) {
                    countFastPath();
                }
                return block;
            }
        }
        admit(size);
        void* block = c10::alloc_cpu(size);
        std::lock_guard lock(m_mutex);
        m_sizes[block] = Block{size, t_cacheBlocks};
        m_inUse += size;
        return block;
    }

    // The memory guard (top of the file): throws HostOutOfMemory for a fresh block the
    // machine (or DEVICERACE_HOST_MEMORY_LIMIT) cannot give.
    void admit(std::size_t size) {
        using Clock = std::chrono::steady_clock;
        std::unique_lock lock(m_mutex);
        const std::size_t limit = hostMemoryLimit();
        const std::size_t headroom = std::max<std::size_t>(std::size_t{256} << 20, physicalMemory() / 20);
        auto available = [&](bool fresh) {
            if (fresh || Clock::now() - m_availableAt > std::chrono::milliseconds(10)) {
                lock.unlock(); // a file read: other lanes' allocations need not wait for it
                const std::size_t read = memAvailable();
                lock.lock();
                m_available = read;
                m_availableAt = Clock::now();
                m_freshSinceRead = 0;
            }
            return m_available > m_freshSinceRead ? m_available - m_freshSinceRead : 0;
        };
        auto fits = [&](bool fresh) {
            const std::size_t avail = available(fresh);
            const bool machine = avail == 0 && m_available == 0 ? true : size + headroom <= avail;
            return machine && (limit == 0 || m_inUse + m_cachedBytes + size <= limit);
        };
        if (!fits(false)) {
            // Give the cached blocks back first; they may be what is missing.
            std::vector<void*> blocks = takeAllCached();
            lock.unlock();
            for (void* block : blocks) {
                c10::free_cpu(block);
            }
            lock.lock();
            if (!fits(true)) {
                HostOutOfMemory e;
                e.requested = size;
                e.inUse = m_inUse;
                const std::size_t machineBudget = m_inUse + (m_available > headroom ? m_available - headroom : 0);
                e.budget = limit ? std::min(limit, machineBudget) : machineBudget;
                e.text = fmt::format("out of memory ({}): a {} block was asked for with {} in use by the lanes and "
                                     "{} available{}",
                                     kHostOutOfMemoryTag, gib(size), gib(m_inUse), gib(m_available),
                                     limit ? fmt::format(" (DEVICERACE_HOST_MEMORY_LIMIT {})", gib(limit)) : "");
                {
                    std::lock_guard last(g_lastOomMutex);
                    g_lastOom = e;
                }
                throw e;
            }
        }
        m_freshSinceRead += size;
    }

    // Every cached block, removed from the lists (the caller frees them outside the lock).
    std::vector<void*> takeAllCached() {
        std::vector<void*> blocks;
        for (auto& [size, list] : m_free) {
            for (void* block : list) {
                m_sizes.erase(block);
                blocks.push_back(block);
            }
        }
        m_free.clear();
        m_cachedBytes = 0;
        return blocks;
    }

    // Keeps a large block for the next request of its size (up to the cap); frees the rest.
    void recycle(void* block) {
        {
            std::lock_guard lock(m_mutex);
            auto it = m_sizes.find(block);
            if (it != m_sizes.end()) {
                const std::size_t size = it->second.size;
                m_inUse -= size;
                if (it->second.keep && m_cachedBytes + size <= m_cap) {
                    m_free[size].push_back(block);
                    m_cachedBytes += size;
                    return;
                }
                m_sizes.erase(it);
            }
        }
        c10::free_cpu(block);
    }

    const std::size_t m_cap;
    std::mutex m_mutex;
    std::unordered_map<std::size_t, std::vector<void*>> m_free; // rounded size -> free blocks
    struct Block {
        std::size_t size = 0;
        bool keep = true; // false: a block of a thread that does not cache (freed when done)
    };
    std::unordered_map<void*, Block> m_sizes; // every large block handed out or kept
    std::size_t m_cachedBytes = 0;
    std::size_t m_inUse = 0; // large blocks handed out and not freed
    // The guard's view of the machine: MemAvailable at m_availableAt, and the fresh blocks
    // handed out since (counted as used: their pages may not be touched yet).
    std::size_t m_available = 0;
    std::chrono::steady_clock::time_point m_availableAt{};
    std::size_t m_freshSinceRead = 0;
    int m_lanes = 0; // CPU lanes between hold() and drop()
};

} // namespace

HostOutOfMemory lastHostOutOfMemory() {
    std::lock_guard lock(g_lastOomMutex);
    return g_lastOom;
}

std::size_t hostMemoryLimit() {
    static const std::size_t limit = []() -> std::size_t {
        const char* env = devicerace::environmentSwitch("DEVICERACE_HOST_MEMORY_LIMIT");
        if (!env || !*env) {
            return 0;
        }
        char* end = nullptr;
        const double v = std::strtod(env, &end);
        if (!(v > 0)) {
            return 0;
        }
        const char unit = end ? *end : 0;
        const double scale = unit == 'K' || unit == 'k'   ? 1024.0
                             : unit == 'M' || unit == 'm' ? 1048576.0
                             : unit == 'G' || unit == 'g' ? 1073741824.0
                                                          : 1.0;
        return static_cast<std::size_t>(v * scale);
    }();
    return limit;
}

bool useCachingHostAllocator() {
    static const bool installed = [] {
        if (devicerace::environmentSwitch("DEVICERACE_KEEP_MALLOC")) {
            return false;
        }
        // A priority above the default's (0), so LibTorch's own registrations do not replace it.
        c10::SetCPUAllocator(&CachingHostAllocator::instance(), 1);
        return c10::GetCPUAllocator() == &CachingHostAllocator::instance();
    }();
    return installed;
}

void cacheThisThreadsBlocks(bool keep) {
    t_cacheBlocks = keep;
    t_laneThread = true;
}

void holdHostCache() {
    if (useCachingHostAllocator()) {
        CachingHostAllocator::instance().hold();
    }
}

void releaseHostCache() {
    if (useCachingHostAllocator()) {
        CachingHostAllocator::instance().drop();
    }
}

} // namespace devicerace::detail
