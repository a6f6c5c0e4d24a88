#pragma once
// Shared by the two recording targets: read a recording folder the way `devicerace-cli
// replay` and the window do (readRecording, then the summary), and check what came back.
#include <cstdlib>

#include "devicerace/errors.h"
#include "devicerace/metric_sample.h"
#include "devicerace/recording.h"
#include "devicerace/summary.h"

namespace devicerace::fuzz {

inline void readAndSummarize(const std::filesystem::path& dir) {
    try {
        const auto r = readRecording(dir);
        if (r.lanes.empty()) {
            std::abort(); // the reader promises 1 or more lanes
        }
        for (const auto& lane : r.lanes) {
            for (const auto& s : r.samples.at(lane.name)) {
                // What was read must write and read back (the recording's own round trip).
                (void)sampleFromJsonLine(toJsonLine(s));
            }
        }
        (void)summarizeRecording(r);
    } catch (const Error&) {
    }
}

} // namespace devicerace::fuzz
