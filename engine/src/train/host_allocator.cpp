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
#include "train/host_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

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
            for (auto& [size, list] : m_free) {
                for (void* block : list) {
                    m_sizes.erase(block);
                    blocks.push_back(block);
                }
            }
            m_free.clear();
            m_cachedBytes = 0;
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
            auto it = m_free.find(size);
            if (it != m_free.end() && !it->second.empty()) {
                void* block = it->second.back();
                it->second.pop_back();
                m_cachedBytes -= size;
                return block;
            }
        }
        void* block = c10::alloc_cpu(size);
        std::lock_guard lock(m_mutex);
        m_sizes[block] = size;
        return block;
    }

    // Keeps a large block for the next request of its size (up to the cap); frees the rest.
    void recycle(void* block) {
        {
            std::lock_guard lock(m_mutex);
            auto it = m_sizes.find(block);
            if (it != m_sizes.end()) {
                const std::size_t size = it->second;
                if (m_cachedBytes + size <= m_cap) {
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
    std::unordered_map<void*, std::size_t> m_sizes;             // every block this cache owns
    std::size_t m_cachedBytes = 0;
    int m_lanes = 0; // CPU lanes between hold() and drop()
};

} // namespace

bool useCachingHostAllocator() {
    static const bool installed = [] {
        if (std::getenv("DEVICERACE_KEEP_MALLOC")) {
            return false;
        }
        // A priority above the default's (0), so LibTorch's own registrations do not replace it.
        c10::SetCPUAllocator(&CachingHostAllocator::instance(), 1);
        return c10::GetCPUAllocator() == &CachingHostAllocator::instance();
    }();
    return installed;
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
