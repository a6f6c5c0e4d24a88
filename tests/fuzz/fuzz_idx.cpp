// libFuzzer target: the IDX reader (readIdx, engine/src/data/idx.cpp), plain and gzip.
// The input is the whole file; a gzip stream (1f 8b) is named .gz so the reader takes the
// gzip path. Read as labels (1 dimension) and as images (3). Only devicerace::Error may
// escape; a result must match its header.
#include <cstdlib>

#include "devicerace/errors.h"
#include "devicerace/idx.h"
#include "fuzz_util.h"

using namespace devicerace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    const auto file = fuzz::scratchDir() / (gz ? "fuzz-idx-ubyte.gz" : "fuzz-idx-ubyte");
    fuzz::writeFile(file, fuzz::asView(data, size));
    for (int dims : {1, 3}) {
        try {
            const auto a = readIdx(file, dims);
            std::uint64_t elements = 1;
            for (auto d : a.dims) {
                elements *= d;
            }
            if (a.dims.size() != static_cast<std::size_t>(dims) || elements != a.data.size() ||
                elements > kIdxMaxElements) {
                std::abort(); // a result that does not match its own header
            }
        } catch (const Error&) {
        }
    }
    return 0;
}
