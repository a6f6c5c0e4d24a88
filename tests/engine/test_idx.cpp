#include <gtest/gtest.h>
#include <sys/resource.h>

#include "devicerace/dataset.h"
#include "devicerace/errors.h"
#include "devicerace/idx.h"
#include "test_util.h"

using namespace devicerace;
using namespace devicerace::test;

namespace {

std::string errorOf(const std::filesystem::path& file, int dims) {
    try {
        readIdx(file, dims);
    } catch (const DataError& e) {
        return e.what();
    }
    return "(no error)";
}

} // namespace

TEST(Idx, ReadsPlainAndGzip) {
    TempDir dir;
    std::vector<std::uint8_t> data = {1, 2, 3, 4, 5, 6};
    auto bytes = idxBytes({2, 1, 3}, data);
    writeFile(dir / "a-idx3-ubyte", bytes);
    writeGzip(dir / "a-idx3-ubyte.gz", bytes);
    for (auto name : {"a-idx3-ubyte", "a-idx3-ubyte.gz"}) {
        auto arr = readIdx(dir / name, 3);
        EXPECT_EQ(arr.dims, (std::vector<std::uint32_t>{2, 1, 3}));
        EXPECT_EQ(arr.data, data);
        EXPECT_EQ(arr.count(), 2);
    }
}

TEST(Idx, RejectsEveryMalformedFile) {
    TempDir dir;
    auto good = idxBytes({4}, {0, 1, 2, 3});
    struct Case {
        std::string name;
        std::string bytes;
        int dims;
        std::string expect;
    };
    std::vector<Case> cases = {
        {"empty", "", 1, "empty (0 bytes)"},
        {"three", std::string("\0\0\x08", 3), 1, "truncated header"},
        {"header-cut", good.substr(0, 6), 1, "truncated header"},
        {"body-cut", good.substr(0, good.size() - 1), 1, "truncated"},
        {"trailing", good + "x", 1, "trailing data"},
        {"magic", std::string("\0\0\x0d\x01", 4) + good.substr(4), 1, "wrong magic number 0x00000d01"},
        {"dims", good, 3, "wrong magic number 0x00000801, expected 0x00000803"},
        {"huge", idxBytes({0xFFFFFFFFu}, {}), 1, "refusing to allocate"},
        {"zero-rows", idxBytes({2, 0, 28}, {}), 3, "dimension 2 is 0"},
    };
    for (const auto& c : cases) {
        writeFile(dir / c.name, c.bytes);
        auto msg = errorOf(dir / c.name, c.dims);
        EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
        EXPECT_NE(msg.find((dir / c.name).string()), std::string::npos) << "message names the file: " << msg;
    }
}

TEST(Idx, GzipAndPlainMustMatchTheName) {
    TempDir dir;
    auto bytes = idxBytes({2}, {1, 2});
    writeGzip(dir / "still-gzipped", bytes);
    writeFile(dir / "not-gzipped.gz", bytes);
    EXPECT_NE(errorOf(dir / "still-gzipped", 1).find("still gzip-compressed"), std::string::npos);
    EXPECT_NE(errorOf(dir / "not-gzipped.gz", 1).find("not gzip-compressed"), std::string::npos);
}

TEST(Idx, TruncatedGzipStreamIsAnError) {
    TempDir dir;
    std::vector<std::uint8_t> data(5000, 7);
    writeGzip(dir / "full.gz", idxBytes({5000}, data));
    std::ifstream in(dir / "full.gz", std::ios::binary);
    std::string gz((std::istreambuf_iterator<char>(in)), {});
    writeFile(dir / "cut.gz", gz.substr(0, gz.size() / 2));
    auto msg = errorOf(dir / "cut.gz", 1);
    EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("corrupt") != std::string::npos) << msg;
}

TEST(Idx, MissingAndNonRegularPaths) {
    TempDir dir;
    EXPECT_NE(errorOf(dir / "nope", 1).find("no such file"), std::string::npos);
    EXPECT_NE(errorOf(dir.path(), 1).find("not a regular file"), std::string::npos);
}

TEST(Dataset, LoadsASmallValidSubsetKeepingTheSplit) {
    TempDir dir;
    writeTinyDataset(dir.path(), 50, 20);
    auto ds = loadFashionMnist(dir.path());
    EXPECT_EQ(ds->train.count, 50);
    EXPECT_EQ(ds->test.count, 20);
    EXPECT_EQ(ds->train.pixels.size(), 50u * 784u);
    EXPECT_EQ(ds->test.labels[13], 3);
    auto limited = loadFashionMnist(dir.path(), 10, 5);
    EXPECT_EQ(limited->train.count, 10);
    EXPECT_EQ(limited->test.labels.size(), 5u);
}

TEST(Dataset, BadFoldersAndMismatchesAreClearErrors) {
    TempDir dir;
    auto message = [](const std::filesystem::path& p) -> std::string {
        try {
            loadFashionMnist(p);
        } catch (const DataError& e) {
            return e.what();
        }
        return "(no error)";
    };
    EXPECT_NE(message(dir / "missing").find("no such folder"), std::string::npos);
    writeFile(dir / "file", "x");
    EXPECT_NE(message(dir / "file").find("is a file"), std::string::npos);
    std::filesystem::create_directories(dir / "empty");
    EXPECT_NE(message(dir / "empty").find("missing train-images-idx3-ubyte"), std::string::npos);

    auto mismatch = dir / "mismatch";
    std::filesystem::create_directories(mismatch);
    writeTinyDataset(mismatch, 30, 10);
    writeGzip(mismatch / "train-labels-idx1-ubyte.gz", idxBytes({29}, std::vector<std::uint8_t>(29, 1)));
    EXPECT_NE(message(mismatch).find("30 images but"), std::string::npos);

    auto badLabel = dir / "badlabel";
    std::filesystem::create_directories(badLabel);
    writeTinyDataset(badLabel, 30, 10);
    std::vector<std::uint8_t> labels(10, 1);
    labels[7] = 10;
    writeGzip(badLabel / "t10k-labels-idx1-ubyte.gz", idxBytes({10}, labels));
    EXPECT_NE(message(badLabel).find("label 10 at index 7 is out of range"), std::string::npos);
}

// Found by fuzzing (tests/fuzz, target idx): a 40-byte gzip file whose header claims
// 1024x1024x1024 images made the reader allocate and zero 1 GiB before finding the stream
// truncated. It must refuse it without the memory.
TEST(Idx, GzipHeaderClaimingAGigabyteIsRefusedWithoutAllocatingIt) {
    TempDir dir;
    writeGzip(dir / "bomb-idx3-ubyte.gz", idxBytes({1024, 1024, 1024}, std::vector<std::uint8_t>(10, 1)));
    rusage before{};
    getrusage(RUSAGE_SELF, &before);
    const auto msg = errorOf(dir / "bomb-idx3-ubyte.gz", 3);
    rusage after{};
    getrusage(RUSAGE_SELF, &after);
    EXPECT_NE(msg.find("truncated: the header (1024x1024x1024) needs 1073741824 data bytes, the file has 10"),
              std::string::npos)
        << msg;
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024)
        << "peak resident memory grew by " << (after.ru_maxrss - before.ru_maxrss) / 1024 << " MiB";
}
