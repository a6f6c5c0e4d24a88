#include "data/data_choice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "data/data_util.h"
#include "devicerace/environment.h"
#include "devicerace/dataset.h"
#include "devicerace/errors.h"
#include "devicerace/idx.h"

namespace devicerace::detail {

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kCifarRecord = 1 + 3 * 32 * 32; // label byte + pixels
// Bytes a token id takes on a device (int64 indices).
constexpr double kTokenBytes = 8;

struct SyntheticRow {
    const char* dataset;
    SyntheticSize size;
};
constexpr SyntheticRow kSyntheticSizes[] = {{"cifar10", {50000, 10000}},
                                            {"fashion-mnist", {60000, 10000}},
                                            {"imagenet", {1281167, 50000}},
                                            {"imdb", {25000, 25000}},
                                            {"text", {30000, 3000}}};

std::int64_t limited(std::int64_t count, std::optional<std::int64_t> limit) {
    return limit ? std::min(*limit, count) : count;
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto d : shape) {
        n *= d;
    }
    return n;
}

// Fashion-MNIST examples in a split: the images' and the labels' headers, which must agree.
std::int64_t idxCount(const fs::path& dir, const std::string& prefix) {
    checkFolder(dir, "the Fashion-MNIST IDX files (install dataset-fashion-mnist, pass --data-dir, or use "
                     "--data synthetic)");
    const auto imageFile = findIdx(dir, prefix + "-images-idx3-ubyte");
    const auto labelFile = findIdx(dir, prefix + "-labels-idx1-ubyte");
    const auto images = readIdxDims(imageFile, 3);
    const auto labels = readIdxDims(labelFile, 1);
    if (images[0] != labels[0]) {
        throw DataError(fmt::format("{} has {} images but {} has {} labels; they must match", imageFile.string(),
                                    images[0], labelFile.string(), labels[0]));
    }
    return images[0];
}

// CIFAR-10 records in the batch files, from their sizes (the load checks every record), with
// the loader's words for a missing or cut file.
std::int64_t cifarCount(const fs::path& dir, const std::vector<std::string>& names) {
    std::vector<std::string> missing;
    for (const auto& name : names) {
        std::error_code ec;
        if (!fs::is_regular_file(dir / name, ec)) {
            missing.push_back(name);
        }
    }
    if (!missing.empty()) {
        throw DataError(fmt::format("{}: missing {} (the CIFAR-10 binary version has data_batch_1..5.bin and "
                                    "test_batch.bin)",
                                    dir.string(), fmt::join(missing, ", ")));
    }
    std::int64_t n = 0;
    for (const auto& name : names) {
        const auto size = static_cast<std::int64_t>(fs::file_size(dir / name));
        if (size == 0 || size % kCifarRecord != 0) {
            throw DataError(fmt::format("{}: {} bytes is not a multiple of the {}-byte CIFAR-10 record (truncated or "
                                        "not the binary version?)",
                                        (dir / name).string(), size, kCifarRecord));
        }
        n += size / kCifarRecord;
    }
    return n;
}

// IMDb reviews in a split: the *.txt files of pos/ and neg/.
std::int64_t reviewCount(const fs::path& split) {
    std::int64_t n = 0;
    for (const char* sub : {"pos", "neg"}) {
        checkFolder(split / sub, "IMDb reviews (*.txt)");
        for (const auto& e : fs::directory_iterator(split / sub)) {
            n += e.is_regular_file() && e.path().extension() == ".txt";
        }
    }
    return n;
}

} // namespace

SyntheticSize syntheticSize(const std::string& dataset) {
    for (const auto& row : kSyntheticSizes) {
        if (dataset == row.dataset) {
            return row.size;
        }
    }
    return kSyntheticSizes[1].size;
}

DataChoice chooseData(const WorkloadInfo& w, std::optional<DataMode> mode, const std::string& dataDir) {
    const bool wantSynthetic = mode == DataMode::Synthetic;
    const bool explicitReal = mode == DataMode::Real;
    const auto synthetic = [&w](std::string note) {
        const auto size = syntheticSize(w.dataset);
        DataChoice c;
        c.syntheticTrain = size.train;
        c.syntheticTest = size.test;
        c.note = std::move(note);
        return c;
    };
    if (w.dataset == "imagenet" && (wantSynthetic || (!explicitReal && dataDir.empty()))) {
        return synthetic(mode ? "" : "no ImageNet here: racing on synthetic data (tf_cnn_benchmarks style)");
    }
    if (w.dataset == "imdb") {
        if (wantSynthetic || (!explicitReal && dataDir.empty())) {
            return synthetic(mode ? "" : "no IMDb reviews given (--data-dir aclImdb): racing on synthetic tokens");
        }
        if (dataDir.empty()) {
            throw UsageError(fmt::format("{}: IMDb is not on this machine; pass --data-dir with the aclImdb folder, or "
                                         "--data synthetic",
                                         w.name));
        }
        return {DataSource::Imdb, dataDir, 0, 0, false, ""};
    }
    if (w.dataset == "text") {
        if (wantSynthetic) {
            return synthetic("");
        }
        DataChoice c{DataSource::Text, dataDir.empty() ? defaultTextCorpus() : fs::path(dataDir), 0, 0, false, ""};
        c.text.length = static_cast<int>(w.inputShape.at(0));
        if (w.tokensPerSample > 0) {
            // A language model: context + 1 characters per example, one example per context
            // (nanoGPT draws random offsets; an epoch of shuffled disjoint windows sees each
            // character once), the text as written.
            c.text.stride = static_cast<int>(w.tokensPerSample);
            c.text.lowercase = false;
        } else if (dataDir.empty() && !devicerace::environmentSwitch("DEVICERACE_TEXT_CORPUS")) {
            // charlstm: the Keras example's windows (40 characters, a new one every 3) over the
            // ~100 KB that fortunes-min ships, not the 2.6 MB the fortunes package adds beside it.
            c.text.onlyFiles = {"fortunes", "literature", "riddles"};
        }
        return c;
    }
    if (wantSynthetic) {
        return synthetic("");
    }
    // Image workloads on real data: CIFAR-10 when given, otherwise the Fashion-MNIST the
    // machine has, padded/resized and channel-expanded to the network's input.
    if (w.dataset == "cifar10" && !dataDir.empty()) {
        return {DataSource::Cifar10, dataDir, 0, 0, false, ""};
    }
    DataChoice c;
    c.source = DataSource::FashionMnist;
    c.path = dataDir.empty() || w.dataset != "fashion-mnist" ? defaultFashionMnistDir() : fs::path(dataDir);
    if (w.dataset != "fashion-mnist") {
        c.adapted = true;
        c.note = fmt::format("{} races on real Fashion-MNIST, padded/resized and channel-expanded to {}{}", w.name,
                             fmt::join(w.inputShape, "x"),
                             w.dataset == "cifar10" ? " (pass --data-dir with CIFAR-10 binaries to use CIFAR-10)" : "");
    }
    return c;
}

DataExtent measureData(const WorkloadInfo& w, std::optional<DataMode> mode, const std::string& dataDir,
                       std::optional<std::int64_t> trainLimit, std::optional<std::int64_t> testLimit) {
    const auto choice = chooseData(w, mode, dataDir);
    DataExtent e;
    e.note = choice.note;
    double exampleBytes = static_cast<double>(product(w.inputShape));
    switch (choice.source) {
    case DataSource::Synthetic:
        e.synthetic = true;
        e.train = limited(choice.syntheticTrain, trainLimit);
        e.test = limited(choice.syntheticTest, testLimit);
        exampleBytes = 0; // generated on the lane's device, batch by batch
        break;
    case DataSource::FashionMnist:
        e.train = limited(idxCount(choice.path, "train"), trainLimit);
        e.test = limited(idxCount(choice.path, "t10k"), testLimit);
        exampleBytes = 28 * 28; // kept as shipped; adapted per batch
        break;
    case DataSource::Cifar10: {
        checkFolder(choice.path, "the CIFAR-10 binary files data_batch_1.bin .. data_batch_5.bin and test_batch.bin");
        e.train = limited(cifarCount(choice.path, {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                                   "data_batch_4.bin", "data_batch_5.bin"}),
                          trainLimit);
        e.test = limited(cifarCount(choice.path, {"test_batch.bin"}), testLimit);
        break;
    }
    case DataSource::Imdb: {
        checkFolder(choice.path, "the IMDb reviews (aclImdb with train/ and test/)");
        const fs::path dir = fs::exists(choice.path / "aclImdb") ? choice.path / "aclImdb" : choice.path;
        e.train = limited(reviewCount(dir / "train"), trainLimit);
        e.test = limited(reviewCount(dir / "test"), testLimit);
        exampleBytes *= kTokenBytes;
        break;
    }
    case DataSource::Text: {
        const auto ds = loadTextCorpus(choice.path, choice.text, trainLimit, testLimit);
        e.train = ds->train.count;
        e.test = ds->test.count;
        exampleBytes *= kTokenBytes;
        break;
    }
    }
    e.deviceBytes = exampleBytes * static_cast<double>(e.train + e.test);
    return e;
}

} // namespace devicerace::detail
