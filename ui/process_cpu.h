#pragma once
// The CPU time of the window's own process and of the processes it started (the lanes' workers,
// which run a race's multi-thread CPU lanes when its OpenMP threads spin, and framework lanes).

namespace devicerace::ui {

/// CPU seconds (user + system) this process has used so far.
double processCpuSeconds();

/// How processTreeCpuSeconds finds the processes below this one: each thread's
/// /proc/PID/task/TID/children file where the kernel has them (Auto), or one scan of every
/// process's parent in /proc/PID/stat (a kernel built without those files).
enum class ChildLookup { Auto, ChildrenFiles, ParentScan };

/// CPU seconds used so far by this process, by the children it has waited for, and by every
/// process below it still running (/proc: each one's own time and its waited-for children's).
/// A child that ended between two readings moves from the live sum to the waited-for one once it
/// is reaped. Linux; elsewhere this process's own time.
double processTreeCpuSeconds(ChildLookup how = ChildLookup::Auto);

} // namespace devicerace::ui
