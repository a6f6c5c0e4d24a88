// CIFAR-10, binary version (https://www.cs.toronto.edu/~kriz/cifar.html): each record is one
// label byte and 3 x 32 x 32 pixel bytes (channel-major).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "data/data_util.h"
#include "devicerace/dataset.h"
#include "devicerace/errors.h"

namespace devicerace {

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kRecord = 1 + 3 * 32 * 32;
// A CIFAR-10 batch file holds 10,000 records; a little slack for variants, no allocation bombs.
constexpr std::uint64_t kMaxFileBytes = 20000ull * kRecord;

void appendBatch(const fs::path& file, DataSplit& split) {
    const std::string bytes = detail::readFileBounded(file, kMaxFileBytes);
    if (bytes.empty()) {
        throw DataError(
            fmt::format("{}: the file is empty; expected CIFAR-10 records of {} bytes", file.string(), kRecord));
    }
    if (bytes.size() % kRecord != 0) {
        throw DataError(fmt::format("{}: {} bytes is not a multiple of the {}-byte CIFAR-10 record (truncated or not "
                                    "the binary version?)",
                                    file.string(), bytes.size(), kRecord));
    }
    const auto records = static_cast<std::int64_t>(bytes.size()) / kRecord;
    for (std::int64_t r = 0; r < records; ++r) {
        const auto* rec = reinterpret_cast<const std::uint8_t*>(bytes.data()) + r * kRecord;
        if (rec[0] > 9) {
            throw DataError(fmt::format("{}: record {} has label {}, expected 0 to 9", file.string(), r, rec[0]));
        }
        split.labels.push_back(rec[0]);
        split.pixels.insert(split.pixels.end(), rec + 1, rec + kRecord);
    }
    split.count += records;
}

void limit(DataSplit& split, std::optional<std::int64_t> n) {
    if (n && *n < split.count) {
        split.count = *n;
        split.labels.resize(static_cast<std::size_t>(*n));
        split.pixels.resize(static_cast<std::size_t>(*n * split.exampleSize()));
    }
}

} // namespace

std::shared_ptr<const Dataset> loadCifar10(const fs::path& dir, std::optional<std::int64_t> trainLimit,
                                           std::optional<std::int64_t> testLimit) {
    detail::checkFolder(dir, "the CIFAR-10 binary files data_batch_1.bin .. data_batch_5.bin and test_batch.bin");
    return detail::cachedLoad("cifar10", dir, trainLimit, testLimit, {}, [&] {
        auto ds = std::make_shared<Dataset>();
        ds->name = "CIFAR-10";
        ds->source = dir.string();
        // The usual per-channel statistics of the CIFAR-10 training set.
        ds->mean = {0.4914f, 0.4822f, 0.4465f};
        ds->stddev = {0.2470f, 0.2435f, 0.2616f};
        ds->train.shape = ds->test.shape = {3, 32, 32};
        std::vector<std::string> missing;
        for (int i = 1; i <= 5; ++i) {
            auto f = dir / fmt::format("data_batch_{}.bin", i);
            if (!fs::exists(f)) {
                missing.push_back(f.filename().string());
            }
        }
        if (!fs::exists(dir / "test_batch.bin")) {
            missing.push_back("test_batch.bin");
        }
        if (!missing.empty()) {
            throw DataError(fmt::format("{}: missing {} (the CIFAR-10 binary version has data_batch_1..5.bin and "
                                        "test_batch.bin)",
                                        dir.string(), fmt::join(missing, ", ")));
        }
        for (int i = 1; i <= 5 && (!trainLimit || ds->train.count < *trainLimit); ++i) {
            appendBatch(dir / fmt::format("data_batch_{}.bin", i), ds->train);
        }
        appendBatch(dir / "test_batch.bin", ds->test);
        limit(ds->train, trainLimit);
        limit(ds->test, testLimit);
        return ds;
    });
}

} // namespace devicerace
