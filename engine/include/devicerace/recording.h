#pragma once
/// Recordings: a race written to disk as it runs — manifest.json plus one JSON-lines file of
/// metric samples per lane (the engine's one event schema), flushed at every sample, so a
/// recording cut off by a crash reads back up to its last whole line. Reading is strict and
/// bounded. The writer belongs to the thread that feeds it; reading is thread-safe.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "devicerace/device_info.h"
#include "devicerace/lane_spec.h"
#include "devicerace/metric_sample.h"
#include "devicerace/race.h"

namespace devicerace {

/// The manifest's format: 2 since the machines are device reports (the hello's JSON shape);
/// readers read 1 and 2 and refuse others.
inline constexpr int kRecordingFormat = 2;

struct RecordedLane {
    std::string name;
    std::string file; // JSON-lines file inside the recording folder
    std::string spec; // the lane in the CLI's syntax
    std::string device;
    std::string host;    // "ssh://..." for a remote lane, else ""
    std::string kind;    // thread | process | remote
    std::string machine; // worker lanes: the machine it ran on, in one line (host, CPU, GPUs, LibTorch)
    std::optional<DeviceReport> machineReport; // worker lanes, format 2: that machine's whole report
    std::optional<double> costPerHour;
    std::int64_t totalSteps = 0;
    std::int64_t batch = 0;
};

struct Recording {
    std::filesystem::path dir;
    std::string appVersion;
    std::string workload;
    std::string dataset;
    bool synthetic = false;
    int vocabulary = 0;                 // token data (manifest format 2 on; 0 where not written)
    std::vector<std::string> tokenText; // each id's text: a language model's alphabet
    bool fair = false;
    std::int64_t warmupSteps = 0; // the steps left out of the speed (0: not written, before manifests had it)
    std::optional<double> targetAccuracy;
    std::optional<double> targetLoss;
    std::string startedAt; // ISO 8601, UTC
    /// Script lanes: the command the race ran, for display only (a recording never starts it).
    std::vector<std::string> command;
    /// The machine the race ran on (format 1 recordings: its CPU, BLAS, versions and host only).
    DeviceReport machine;
    std::string gpuNames; // "NVIDIA H100 80GB HBM3, ..." (format 1: as written)
    std::vector<RecordedLane> lanes;
    std::map<std::string, std::vector<MetricSample>> samples; // per lane name, in file order
    std::vector<std::string> warnings; // e.g. "cpu·1.jsonl: last line cut off; read up to line 812"
};

class RecordingWriter {
public:
    /// Creates `dir` (must not hold a manifest already) and writes the manifest for `race`.
    /// Throws Error naming the path and the reason.
    RecordingWriter(const std::filesystem::path& dir, const Race& race);
    ~RecordingWriter();
    RecordingWriter(const RecordingWriter&) = delete;
    RecordingWriter& operator=(const RecordingWriter&) = delete;
    /// Appends one sample to its lane's file and flushes it.
    void append(const MetricSample& sample);
    const std::filesystem::path& dir() const { return m_dir; }
    /// The lane files, in the race's lane order (a CSV export streams them).
    const std::vector<std::filesystem::path>& laneFiles() const { return m_paths; }

private:
    std::filesystem::path m_dir;
    std::vector<std::filesystem::path> m_paths;
    std::map<std::string, std::FILE*> m_files;
};

/// Reads a recording folder; throws DataError for a missing/unknown/hostile manifest. A lane
/// file cut off mid-line reads up to its last whole line (and says so in `warnings`).
Recording readRecording(const std::filesystem::path& dir);
/// One recorded lane's summary from its first `count` samples (all when count exceeds them).
/// A lane whose samples are all played and whose recording never says it ended (the app was
/// killed, the disk filled) is `stopped`, with "the recording ends at step N, before the lane did".
LaneSummary summarizeRecordedLane(const Recording& recording, const RecordedLane& lane, std::size_t count);
/// The same from a RunningSummary fed that lane's first `played` samples (a replay's live summary).
LaneSummary summarizeRecordedLane(const Recording& recording, const RecordedLane& lane, const RunningSummary& running,
                                  std::size_t played);
/// The summary the live race would have shown, from the recorded samples.
RaceSummary summarizeRecording(const Recording& recording);
/// The recordings of a repeat set (`--record DIR --repeat N` and the window's repeats write
/// DIR/repeat-1 … DIR/repeat-N), in order of N; empty when `dir` is a recording itself or holds
/// no repeat-K recording.
std::vector<std::filesystem::path> repeatSetFolders(const std::filesystem::path& dir);

} // namespace devicerace
