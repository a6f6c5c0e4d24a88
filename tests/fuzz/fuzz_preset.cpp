// libFuzzer target: preset JSON (parsePreset, engine/src/lanes/preset.cpp), including the
// expansion of generic lanes (best-gpu, all-cores, threads=powers, workers=powers) on a fake
// machine without GPUs and on one with two (fuzz_shim.cpp). Only devicerace::Error may escape.
#include <cstdlib>

#include "devicerace/errors.h"
#include "devicerace/preset.h"
#include "fuzz_util.h"

using namespace devicerace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(fuzz::asView(data, size));
    for (bool gpus : {false, true}) {
        fuzz::setFakeGpus(gpus);
        try {
            const auto p = parsePreset(text, "fuzz.json");
            for (const auto& race : p.races) {
                if (race.spec.lanes.empty()) {
                    std::abort(); // the parser promises at least the default lanes
                }
            }
        } catch (const Error&) {
        }
    }
    fuzz::setFakeGpus(false);
    return 0;
}
