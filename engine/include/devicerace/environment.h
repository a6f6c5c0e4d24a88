#pragma once
/// Every DEVICERACE_* environment variable DeviceRace reads, in one table: its name, whom it is for
/// and what it does. environmentSwitch() is the only place that reads one (the lint refuses a
/// getenv of a DEVICERACE_ name anywhere else), so this table is the whole list. Thread-safe.
#include <span>
#include <string_view>

namespace devicerace {

struct EnvironmentSwitch {
    const char* name;     // "DEVICERACE_CACHE_DIR"
    const char* audience; // "users", "tests", "benchmarks", "internal" (set by DeviceRace for its own processes)
    const char* meaning;  // what it does, in one sentence
};

/// The table, in name order.
std::span<const EnvironmentSwitch> environmentSwitches();

/// The variable's value (std::getenv: nullptr when unset). Throws std::logic_error for a name
/// the table does not hold (a typo, or a switch added without its row).
const char* environmentSwitch(std::string_view name);

} // namespace devicerace
