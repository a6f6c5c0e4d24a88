// libFuzzer target: the worker protocol (engine/src/workers/protocol.cpp) as a parent or a
// worker reads it: bytes cut into lines (LineSplitter, fed in uneven chunks, with the real
// line cap and with a small one), each line as a message (parseMessage), and every message's
// body through the readers of config, ready, hello (deviceReportFromJson,
// engine/src/devices/device_json.cpp) and sample (sampleFromJsonLine). A config or ready that
// reads must write and read back. Only devicerace::Error may escape.
#include <cstdlib>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/metric_sample.h"
#include "fuzz_util.h"
#include "workers/protocol.h"

using namespace devicerace;
using namespace devicerace::detail;

namespace {

void onMessage(const Message& m) {
    const auto& b = m.body;
    try {
        auto [spec, settings] = configFromMessage(b);
        (void)configFromMessage(configMessage(spec, settings));
    } catch (const Error&) {
    }
    try {
        (void)readyFromMessage(readyMessage(readyFromMessage(b)));
    } catch (const Error&) {
    }
    if (auto it = b.find("devices"); it != b.end() && it->is_object()) {
        try {
            (void)deviceReportFromJson(it->dump());
        } catch (const Error&) {
        }
    }
    if (auto it = b.find("sample"); it != b.end()) {
        try {
            (void)sampleFromJsonLine(it->dump());
        } catch (const Error&) {
        }
    }
    if (auto it = b.find("proto"); it != b.end() && it->is_string()) {
        (void)protoMajor(it->get<std::string>());
    }
    (void)encodeMessage(b);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto bytes = fuzz::asView(data, size);
    for (std::size_t cap : {kMaxLineBytes, std::size_t{48}}) {
        LineSplitter split(cap);
        std::size_t lines = 0;
        auto onLine = [&](std::string&& line) {
            ++lines;
            if (line.size() > cap || line.find('\n') != std::string::npos) {
                std::abort(); // the splitter promises lines within its cap, without newlines
            }
            if (auto m = parseMessage(line)) {
                if (!m->body.is_object() || m->body.at("type").get<std::string>() != m->type) {
                    std::abort();
                }
                if (cap == kMaxLineBytes) {
                    onMessage(*m);
                }
            }
        };
        // Uneven chunks, as reads from a pipe arrive: 1, 2, 3, ... bytes.
        std::size_t at = 0;
        for (std::size_t n = 1; at < bytes.size(); ++n) {
            const auto chunk = bytes.substr(at, n);
            split.feed(chunk, onLine);
            at += chunk.size();
        }
        if (split.partial().size() > cap) {
            std::abort();
        }
        (void)lines;
    }
    return 0;
}
