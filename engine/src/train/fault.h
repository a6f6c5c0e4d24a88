#pragma once
// Fault injection for tests of lane isolation (lane key fault=, parsed with the other keys:
// devicerace/lane_spec.h LaneFault).
#include <cstdint>
#include <string>

namespace devicerace::detail {

struct Fault {
    std::string kind;      // throw | abort | segv | exit | hang | slow-data ("" none)
    std::int64_t step = 0; // the step at which it fires (1-based; 0: before training starts)
};

/// Does what the fault says, in the calling (lane) thread: throws, aborts the process, raises
/// SIGSEGV, _exit(42)s, or blocks forever ignoring stop requests. slow-data does nothing here:
/// the trainer adds its delay to the data phase of every step from fault.step on.
void injectFault(const Fault& fault);

/// slow-data's extra input work per step: an input-bound lane for tests of the breakdown.
inline constexpr int kSlowDataMilliseconds = 20;

} // namespace devicerace::detail
