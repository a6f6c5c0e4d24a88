#pragma once
// The CLI's subcommands. Each returns the process exit status:
// 0 all lanes finished, 1 a lane failed, diverged or was stopped, 2 bad usage or bad input.
#include <string>
#include <vector>

#include "devicerace/lane_spec.h"
#include "devicerace/worker.h"

namespace devicerace::cli {

struct RaceOptions {
    RaceSpec spec;
    std::string preset; // run a preset's races instead of the spec
    std::vector<std::string> laneTexts;
    std::string jsonFile, csvFile, jsonlFile;
    std::string recordDir; // write a recording (manifest + JSON lines per lane) as the race runs
    bool quiet = false;
    bool planOnly = false;      // --plan: print the resolved race as JSON, run nothing
    bool live = false;          // --live: lanes at once, even where the default race is fair
    bool workloadGiven = false; // --workload was given (else the first race's, without --lane)
    int repeats = 1;            // --repeat N: the whole race N times, fresh lanes each time
    /// What the race is when no --lane chose it (the first race, or the given workload on its
    /// lanes): printed once the race is set up, so never beside an error.
    std::string firstRaceNote;
    std::vector<std::string> argv; // the command line, to start again with OMP_WAIT_POLICY set
};

/// This machine's devices; the text adds the peaks "% of peak" uses (CPU: measured once, cached).
int runDevices(bool json, bool remeasurePeaks = false);
/// devices --host ssh://...: the devices of another machine, through its worker's hello.
int runRemoteDevices(const std::string& host, const std::string& cli, bool json);
/// worker --proto N: stdout is moved aside (only protocol lines go there), then the worker runs.
int runWorkerCommand(int proto, const std::string& framework, const WorkerLaunch& launch = {});
int runWorkloads(bool json, bool schema);
int runRace(RaceOptions options);
int runPresets(bool json);

struct ExportOptions {
    std::string dir;
    std::string csvFile, jsonFile, tensorboardDir, dawnbenchFile;
};
int runReplay(const std::string& dir);
int runExport(const ExportOptions& options);

} // namespace devicerace::cli
