#pragma once
// A caching CPU allocator for the lanes: the large blocks a CPU training step frees are kept
// for the next step instead of being handed back to the kernel and faulted in again (see
// host_allocator.cpp for what it fixes and the measurements).

namespace devicerace::detail {

/// Installs the caching allocator as LibTorch's CPU allocator, once per process; call it
/// before a CPU lane's thread starts. Returns true when it is in effect: false where
/// DEVICERACE_KEEP_MALLOC is set (LibTorch's own allocator stays).
bool useCachingHostAllocator();

/// A CPU lane starts (installs the allocator first): its blocks are kept until
/// releaseHostCache().
void holdHostCache();

/// A CPU lane has ended; when no CPU lane is left, the cached blocks are freed.
void releaseHostCache();

} // namespace devicerace::detail
