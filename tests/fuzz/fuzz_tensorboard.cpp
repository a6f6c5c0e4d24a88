// libFuzzer target: the TensorBoard event file reader (readTfEventFile,
// engine/src/record/tensorboard.cpp): TFRecord framing, masked CRC-32C, and the Event /
// Summary protocol buffers. Inputs with wrong CRCs stop at the first record, so the driver
// also reads a copy with every record's CRCs recomputed, to reach the event decoder.
// Only devicerace::Error may escape.
#include <cstdlib>
#include <cstring>

#include "devicerace/errors.h"
#include "devicerace/tensorboard.h"
#include "fuzz_util.h"

using namespace devicerace;

namespace {

// The input with each record's length and data CRCs made right (as far as records go).
std::string fixCrcs(std::string bytes) {
    std::size_t pos = 0;
    while (bytes.size() - pos >= 12) {
        std::uint64_t len;
        std::memcpy(&len, bytes.data() + pos, 8);
        const std::uint32_t lenCrc = maskedCrc32c(bytes.data() + pos, 8);
        std::memcpy(bytes.data() + pos + 8, &lenCrc, 4);
        if (len > bytes.size() - pos - 12 || bytes.size() - pos - 12 - len < 4) {
            break;
        }
        const std::uint32_t dataCrc = maskedCrc32c(bytes.data() + pos + 12, len);
        std::memcpy(bytes.data() + pos + 12 + len, &dataCrc, 4);
        pos += 12 + len + 4;
    }
    return bytes;
}

void read(const std::filesystem::path& file, std::string_view bytes) {
    fuzz::writeFile(file, bytes);
    try {
        const auto f = readTfEventFile(file);
        if (f.records == 0 && !bytes.empty()) {
            std::abort();
        }
    } catch (const Error&) {
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto file = fuzz::scratchDir() / "events.out.tfevents.fuzz";
    const auto bytes = fuzz::asView(data, size);
    read(file, bytes);
    const auto fixed = fixCrcs(std::string(bytes));
    if (fixed != bytes) {
        read(file, fixed);
    }
    return 0;
}
