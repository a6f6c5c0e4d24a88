// libFuzzer target: lane spec strings (parseLaneSpec, engine/src/lanes/lane_spec.cpp), as
// typed on the command line, in presets, recordings and the worker protocol's config. Also
// the lane's kind and ranks, and a round trip: a spec that parses formats (formatLaneSpec)
// into a string that parses again to the same text. Only devicerace::Error may escape.
#include <cstdio>
#include <cstdlib>

#include "devicerace/errors.h"
#include "devicerace/lane_spec.h"
#include "devicerace/recording.h"
#include "fuzz_util.h"

using namespace devicerace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(fuzz::asView(data, size));
    if (text.starts_with("ssh://")) {
        try {
            (void)parseSshTarget(text);
        } catch (const Error&) {
        }
    }
    LaneSpec spec;
    try {
        spec = parseLaneSpec(text);
    } catch (const Error&) {
        return 0;
    }
    try {
        (void)laneKind(spec);
        (void)laneRanks(spec);
    } catch (const Error&) {
    }
    const auto once = formatLaneSpec(spec);
    std::string twice;
    try {
        twice = formatLaneSpec(parseLaneSpec(once));
    } catch (const Error& e) {
        std::fprintf(stderr, "round trip: '%s' formats as '%s', which does not parse: %s\n", text.c_str(), once.c_str(),
                     e.what());
        std::abort();
    }
    if (twice != once) {
        std::fprintf(stderr, "round trip: '%s' -> '%s' -> '%s'\n", text.c_str(), once.c_str(), twice.c_str());
        std::abort();
    }
    return 0;
}
