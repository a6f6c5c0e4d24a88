// CIFAR-10 binaries, IMDb folders and text corpora: valid small inputs load, bad ones are
// clear DataErrors naming the file.
#include <gtest/gtest.h>

#include "devicerace/dataset.h"
#include "devicerace/errors.h"
#include "test_util.h"

using namespace devicerace;
using namespace devicerace::test;

namespace {

std::string cifarRecords(int n, int label = 3) {
    std::string out;
    for (int i = 0; i < n; ++i) {
        out += static_cast<char>(label >= 0 ? label : i % 10);
        out.append(3072, static_cast<char>(i));
    }
    return out;
}

void writeCifar(const std::filesystem::path& dir, int perBatch) {
    for (int b = 1; b <= 5; ++b) {
        writeFile(dir / ("data_batch_" + std::to_string(b) + ".bin"), cifarRecords(perBatch, -1));
    }
    writeFile(dir / "test_batch.bin", cifarRecords(perBatch, -1));
}

template <typename F>
std::string errorOf(F&& f) {
    try {
        f();
    } catch (const DataError& e) {
        return e.what();
    }
    return "(no error)";
}

} // namespace

TEST(Cifar, LoadsTheBinaryVersion) {
    TempDir dir;
    writeCifar(dir.path(), 7);
    auto ds = loadCifar10(dir.path());
    EXPECT_EQ(ds->train.count, 35);
    EXPECT_EQ(ds->test.count, 7);
    EXPECT_EQ(ds->train.shape, (std::vector<std::int64_t>{3, 32, 32}));
    EXPECT_EQ(ds->train.labels[12], 12 % 7 % 10);
    EXPECT_EQ(ds->train.pixels.size(), 35u * 3072u);
    EXPECT_EQ(ds->mean.size(), 3u);
    EXPECT_EQ(loadCifar10(dir.path(), 10, 2)->train.count, 10);
}

TEST(Cifar, BadFilesAreClearErrors) {
    TempDir dir;
    writeCifar(dir.path(), 2);
    auto batch1 = dir / "data_batch_1.bin";
    writeFile(batch1, cifarRecords(2).substr(0, 5000));
    EXPECT_NE(errorOf([&] { loadCifar10(dir.path()); }).find("not a multiple of the 3073-byte"), std::string::npos);
    writeFile(batch1, cifarRecords(2, 255));
    EXPECT_NE(errorOf([&] { loadCifar10(dir.path(), 1, 1); }).find("has label 255, expected 0 to 9"),
              std::string::npos);
    writeFile(batch1, "");
    EXPECT_NE(errorOf([&] { loadCifar10(dir.path(), 3, 1); }).find("data_batch_1.bin: the file is empty"),
              std::string::npos);
    std::filesystem::remove(dir / "data_batch_4.bin");
    std::filesystem::remove(dir / "test_batch.bin");
    EXPECT_NE(errorOf([&] { loadCifar10(dir.path(), 4, 1); }).find("missing data_batch_4.bin, test_batch.bin"),
              std::string::npos);
    EXPECT_NE(errorOf([&] { loadCifar10(dir / "nope"); }).find("no such folder"), std::string::npos);
}

TEST(Imdb, TokenisesPadsAndLabels) {
    TempDir dir;
    for (auto split : {"train", "test"}) {
        for (auto sentiment : {"pos", "neg"}) {
            auto d = dir / "aclImdb" / split / sentiment;
            std::filesystem::create_directories(d);
            for (int i = 0; i < 3; ++i) {
                writeFile(d / (std::to_string(i) + "_7.txt"), std::string(sentiment) == "pos"
                                                                  ? "A great, great film!<br />Loved it."
                                                                  : "Awful film. Boring");
            }
        }
    }
    auto ds = loadImdb(dir.path(), 100, 6);
    EXPECT_EQ(ds->kind, DataKind::Tokens);
    EXPECT_EQ(ds->train.count, 6);
    EXPECT_EQ(ds->train.shape, (std::vector<std::int64_t>{6}));
    // Positives and negatives alternate; "film" (in every review) is the most frequent word: id 2.
    EXPECT_EQ(ds->train.labels[0], 1);
    EXPECT_EQ(ds->train.labels[1], 0);
    const auto* neg = &ds->train.tokens[6]; // "awful film boring", padded at the front
    EXPECT_EQ(neg[0], 0);
    EXPECT_EQ(neg[4], 2);
    EXPECT_EQ(ds->tokenText[2], "film");
    const auto* pos = &ds->train.tokens[0]; // the last 6 of "a great great film loved it"
    EXPECT_EQ(ds->tokenText[static_cast<std::size_t>(pos[5])], "it");
    EXPECT_NE(errorOf([&] { loadImdb(dir / "aclImdb" / "train", 100, 6); }).find("no such folder"), std::string::npos);
}

TEST(TextCorpus, WindowsAndAlphabet) {
    TempDir dir;
    std::string text;
    for (int i = 0; i < 40; ++i) {
        text += "The quick brown fox jumps over the lazy dog. ";
    }
    writeFile(dir / "corpus.txt", text);
    auto ds = loadTextCorpus(dir / "corpus.txt", 10, 3);
    EXPECT_EQ(ds->kind, DataKind::Tokens);
    EXPECT_EQ(ds->vocabulary, static_cast<int>(ds->tokenText.size()));
    EXPECT_EQ(ds->vocabulary, 28); // 26 letters (lowercased), space, full stop
    EXPECT_GT(ds->train.count, ds->test.count);
    EXPECT_EQ(ds->train.shape, (std::vector<std::int64_t>{10}));
    // Each label is the character after its window.
    std::string decoded;
    for (int k = 0; k < 10; ++k) {
        decoded += ds->tokenText[static_cast<std::size_t>(ds->train.tokens[static_cast<std::size_t>(k)])];
    }
    EXPECT_EQ(decoded, "the quick ");
    EXPECT_EQ(ds->tokenText[static_cast<std::size_t>(ds->train.labels[0])], "b");

    writeFile(dir / "latin1.txt", std::string(500, 'a') + "\xe9t\xe9");
    EXPECT_NE(
        errorOf([&] { loadTextCorpus(dir / "latin1.txt", 10, 3); }).find("not UTF-8 text (invalid byte at offset 500)"),
        std::string::npos);
    writeFile(dir / "tiny.txt", "hello");
    EXPECT_NE(errorOf([&] { loadTextCorpus(dir / "tiny.txt", 10, 3); }).find("too little text"), std::string::npos);
    EXPECT_NE(errorOf([&] { loadTextCorpus(dir / "missing.txt", 10, 3); }).find("no such file or folder"),
              std::string::npos);
}
