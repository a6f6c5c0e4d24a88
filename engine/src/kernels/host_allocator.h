#pragma once
// A caching CPU allocator for the lanes: the large blocks a CPU training step frees are kept
// for the next step instead of being handed back to the kernel and faulted in again (see
// host_allocator.cpp for what it fixes and the measurements).

#include <cstddef>
#include <new>
#include <string>

namespace devicerace::detail {

/// Thrown by the caching allocator instead of allocating a block the machine cannot give: the
/// kernel's OOM killer would otherwise end the whole app (every lane, the window) mid-step.
/// A lane that gets it fails alone ("out of memory at step N (batch B): try batch <= ...").
struct HostOutOfMemory : std::bad_alloc {
    std::size_t requested = 0; // the block asked for
    std::size_t inUse = 0;     // large blocks the lanes held at that moment
    std::size_t budget = 0;    // what they may hold: in use + available - headroom, or the cap
    std::string text;
    const char* what() const noexcept override { return text.c_str(); }
};

/// Marks messages of HostOutOfMemory (also once LibTorch has wrapped it in its own error).
inline constexpr const char* kHostOutOfMemoryTag = "host memory guard";

/// The details of the last HostOutOfMemory thrown in this process (for the lane's message when
/// LibTorch rethrew it as another type).
HostOutOfMemory lastHostOutOfMemory();

/// What the guard allows the lanes' large CPU blocks in total: MemAvailable at each fresh
/// allocation minus a headroom (max(256 MiB, 1/20 of RAM)), and DEVICERACE_HOST_MEMORY_LIMIT
/// (bytes, or with a K/M/G suffix) when set: a cap for demos on a shared laptop, and tests.
std::size_t hostMemoryLimit(); // 0: none set

/// Installs the caching allocator as LibTorch's CPU allocator, once per process; call it
/// before a CPU lane's thread starts. Returns true when it is in effect: false where
/// DEVICERACE_KEEP_MALLOC is set (LibTorch's own allocator stays).
bool useCachingHostAllocator();

/// Whether the calling thread's large blocks are kept for its next request of their size (the
/// default) or freed as LibTorch's own allocator frees them; the memory guard checks both. A
/// lane's thread sets it from its host-cache fast path (kernels/fast_paths.h).
void cacheThisThreadsBlocks(bool keep);

/// A CPU lane starts (installs the allocator first): its blocks are kept until
/// releaseHostCache().
void holdHostCache();

/// A CPU lane has ended; when no CPU lane is left, the cached blocks are freed.
void releaseHostCache();

} // namespace devicerace::detail
