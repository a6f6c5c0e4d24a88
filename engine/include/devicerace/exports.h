#pragma once
/// Race results as files: the JSON summary, CSV and JSON-lines of metric samples.
/// The GUI and the CLI write the same schemas. Thread-safe (pure functions).
#include <filesystem>
#include <string>
#include <vector>

#include "devicerace/metric_sample.h"
#include "devicerace/race.h"
#include "devicerace/race_plan.h"

namespace devicerace {

/// The CLI's --json schema: {"workload", "dataset": {"name", "synthetic"}, "lanes": [...], "speedup": {...}}.
std::string summaryToJson(const RaceSummary& summary);

/// A resolved race (devicerace-cli race --plan): its lanes as they will run, the evaluation
/// interval, the CPU-sharing note and every problem; what the window shows before Start.
std::string planToJson(const RacePlan& plan);
/// One header line, then one row per sample.
std::string samplesToCsv(const std::vector<MetricSample>& samples);
/// Writes the CSV of the samples in JSON-lines files (a recording's lane files, read a line at
/// a time: memory stays bounded whatever their length; a last line without its newline is still
/// being written and is left out), then of `more`, to `out` atomically. Rows are grouped by
/// file. Throws Error naming the path, DataError for a line that is not a sample.
void writeSamplesCsv(const std::vector<std::filesystem::path>& jsonLineFiles, const std::vector<MetricSample>& more,
                     const std::filesystem::path& out);
/// One JSON object per line (the event schema).
std::string samplesToJsonLines(const std::vector<MetricSample>& samples);

/// Writes `contents` atomically (temporary file in the same folder, then rename), checking
/// every byte. Throws Error naming the path and the system's reason.
void writeFileAtomically(const std::filesystem::path& path, const std::string& contents);

} // namespace devicerace
