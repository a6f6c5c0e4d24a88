#pragma once
// Text and JSON the CLI prints: device and workload listings, the race summary. Main thread only.
#include <cstdio>
#include <string>

#include "devicerace/device_info.h"
#include "devicerace/format.h"
#include "devicerace/race.h"
#include "devicerace/repeats.h"

namespace devicerace::cli {

/// The columns `text` takes on a terminal: its characters (UTF-8; "·" is one), for the tables'
/// widths.
std::size_t textColumns(const std::string& text);
/// "finished", "failed: <why>", or the message alone when it already starts with the state.
std::string stateText(LaneState state, const std::string& message);

std::string devicesText(const DeviceReport& report);
std::string devicesJson(const DeviceReport& report);
/// The peaks "% of peak" is measured against: this machine's CPU GEMM calibration (1 thread and
/// every core; bf16 where the CPU has bf16 units), measured once and cached, and each GPU's
/// datasheet figure. `remeasure` ignores the cache.
std::string peaksText(const DeviceReport& report, bool remeasure);
std::string workloadsText();
std::string workloadsJson();
std::string summaryText(const RaceSummary& summary, const QualityTarget& target);
/// The "why" table under the summary: achieved FLOP/s and share of peak, the step-time
/// breakdown and the input-bound flag per lane, the peaks used, and energy (or why none).
std::string explainText(const RaceSummary& summary);
/// --repeat's table: per lane the median ± standard deviation and range of samples/s (tokens/s
/// for language models) and time to target, and the speedup with its spread and noise verdict.
std::string repeatsText(const RepeatSummary& summary);
/// The warning printed when LibTorch's BLAS is a reference implementation (empty otherwise).
std::string blasWarning(const DeviceReport& report);

} // namespace devicerace::cli
