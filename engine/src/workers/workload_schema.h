#pragma once
// The workload schema: every workload's definition and the constants a lane program shares with
// the engine, as JSON. The one source the Python lanes read (the config message carries a lane's
// entry; `devicerace-cli workloads --schema` prints the whole), so nothing is copied by hand.
#include <nlohmann/json.hpp>

#include <string>

namespace devicerace::detail {

/// Version of the schema's layout; a reader refuses a major it does not know.
inline constexpr int kWorkloadSchemaVersion = 1;

/// One workload's entry (its parameters counted at the defaults). Throws UsageError for an
/// unknown name.
nlohmann::json workloadSchemaEntry(const std::string& name);
/// What every lane program shares with the engine's trainer: the step buffer, the synthetic
/// pool, the divergence factor, the thread ceiling, the default report interval.
nlohmann::json sharedConstants();
/// {"schema", "constants", "workloads": [every entry, in list order]}.
nlohmann::json workloadSchema();

} // namespace devicerace::detail
