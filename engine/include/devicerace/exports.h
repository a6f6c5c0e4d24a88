#pragma once
/// Race results as files: the JSON summary, CSV and JSON-lines of metric samples.
/// The GUI and the CLI write the same schemas. Thread-safe (pure functions).
#include <filesystem>
#include <string>
#include <vector>

#include "devicerace/metric_sample.h"
#include "devicerace/race.h"

namespace devicerace {

/// The CLI's --json schema: {"workload", "dataset": {"name", "synthetic"}, "lanes": [...], "speedup": {...}}.
std::string summaryToJson(const RaceSummary& summary);
/// One header line, then one row per sample.
std::string samplesToCsv(const std::vector<MetricSample>& samples);
/// One JSON object per line (the event schema).
std::string samplesToJsonLines(const std::vector<MetricSample>& samples);

/// Writes `contents` atomically (temporary file in the same folder, then rename), checking
/// every byte. Throws Error naming the path and the system's reason.
void writeFileAtomically(const std::filesystem::path& path, const std::string& contents);

} // namespace devicerace
