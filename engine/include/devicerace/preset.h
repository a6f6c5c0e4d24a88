#pragma once
/// Presets: the seed experiments as ready races (resources/presets/*.json). A preset names
/// devices generically and adapts to the machine: "best-gpu" (cuda:0, or the lane is left
/// out with a note), "best-device" (cuda:0, else all CPU cores), "all-cores", and
/// "cpu,threads=powers" (1, 2, 4, ... threads up to the cores present). Thread-safe.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "devicerace/lane_spec.h"

namespace devicerace {

struct PresetRace {
    std::string title;
    RaceSpec spec;
    std::vector<std::string> notes; // what the adaptation changed ("no GPU: lane best-gpu left out")
    /// A shipped recording of the GPU lane (the preset's "stand_in", a folder beside the preset
    /// file), set only where this machine has no CUDA device and a GPU lane was left out: the
    /// window replays it beside the live lanes, so the race still shows what a GPU does.
    std::optional<std::filesystem::path> standIn;
};

struct Preset {
    std::string name;
    std::string description;
    std::string seed; // the seed post it reproduces ("000", "003", ...)
    std::vector<PresetRace> races;
};

/// Where presets are looked up: $DEVICERACE_PRESETS, the installed share/devicerace/presets,
/// then the source tree's resources/presets.
std::vector<std::filesystem::path> presetDirs();
/// Names of the presets found, sorted.
std::vector<std::string> presetNames();
/// Loads a preset by name or by path to a .json file; throws UsageError (unknown name) or
/// DataError (malformed or hostile file: bounded, versioned, every field checked).
Preset loadPreset(const std::string& nameOrPath);
/// Parses preset JSON text (`origin` names it in errors; a "stand_in" folder is resolved in
/// `baseDir`, the preset file's folder).
Preset parsePreset(const std::string& json, const std::string& origin, const std::filesystem::path& baseDir = {});

} // namespace devicerace
