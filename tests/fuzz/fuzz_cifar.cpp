// libFuzzer target: the CIFAR-10 binary reader (loadCifar10, engine/src/data/cifar.cpp).
// The input is test_batch.bin; data_batch_1..5.bin exist (empty) and are skipped by a train
// limit of 0, so every input reaches the record parser. Only devicerace::Error may escape.
#include <cstdlib>

#include "devicerace/dataset.h"
#include "devicerace/errors.h"
#include "fuzz_util.h"

using namespace devicerace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const auto dir = [] {
        auto d = fuzz::scratchDir() / "cifar";
        std::filesystem::create_directories(d);
        for (int i = 1; i <= 5; ++i) {
            fuzz::writeFile(d / ("data_batch_" + std::to_string(i) + ".bin"), "");
        }
        return d;
    }();
    fuzz::writeFile(dir / "test_batch.bin", fuzz::asView(data, size));
    // An odd-sized input also exercises the test limit.
    const std::optional<std::int64_t> testLimit = size % 2 ? std::optional<std::int64_t>(1) : std::nullopt;
    try {
        auto ds = loadCifar10(dir, 0, testLimit);
        const auto& t = ds->test;
        if (t.count < 0 || t.labels.size() != static_cast<std::size_t>(t.count) ||
            t.pixels.size() != static_cast<std::size_t>(t.count) * 3 * 32 * 32 || ds->train.count != 0) {
            std::abort();
        }
        for (auto l : t.labels) {
            if (l < 0 || l > 9) {
                std::abort();
            }
        }
    } catch (const Error&) {
    }
    return 0;
}
