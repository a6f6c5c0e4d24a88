#include "devicerace/dataset.h"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <tuple>
#include <unistd.h>

#include "devicerace/errors.h"
#include "devicerace/idx.h"

namespace devicerace {

namespace fs = std::filesystem;

fs::path defaultFashionMnistDir() {
    if (const char* env = std::getenv("DEVICERACE_FASHION_MNIST")) {
        return env;
    }
    return "/usr/share/datasets/fashion-mnist";
}

namespace {

// The IDX names as shipped by zalandoresearch and the Debian package; plain or .gz.
fs::path findIdx(const fs::path& dir, const std::string& stem) {
    for (const auto& candidate : {dir / stem, dir / (stem + ".gz")}) {
        std::error_code ec;
        if (fs::exists(candidate, ec)) {
            return candidate;
        }
    }
    throw DataError(fmt::format("{}: missing {} (or {}.gz); expected the Fashion-MNIST IDX files there "
                                "(Debian package dataset-fashion-mnist, or --data synthetic)",
                                dir.string(), stem, stem));
}

ImageSet loadSplit(const fs::path& dir, const std::string& prefix, std::optional<std::int64_t> limit, int classes) {
    auto imageFile = findIdx(dir, prefix + "-images-idx3-ubyte");
    auto labelFile = findIdx(dir, prefix + "-labels-idx1-ubyte");
    auto images = readIdx(imageFile, 3);
    auto labels = readIdx(labelFile, 1);
    if (images.dims[0] != labels.dims[0]) {
        throw DataError(fmt::format("{} has {} images but {} has {} labels; they must match", imageFile.string(),
                                    images.dims[0], labelFile.string(), labels.dims[0]));
    }
    if (images.dims[1] != 28 || images.dims[2] != 28) {
        throw DataError(fmt::format("{}: images are {}x{}, expected 28x28 (Fashion-MNIST/MNIST)", imageFile.string(),
                                    images.dims[1], images.dims[2]));
    }
    for (std::size_t i = 0; i < labels.data.size(); ++i) {
        if (labels.data[i] >= classes) {
            throw DataError(fmt::format("{}: label {} at index {} is out of range (expected 0 to {})",
                                        labelFile.string(), labels.data[i], i, classes - 1));
        }
    }
    ImageSet set;
    set.count = images.dims[0];
    if (limit && *limit < set.count) {
        set.count = *limit;
    }
    const std::size_t pixelsPer = 28 * 28;
    images.data.resize(static_cast<std::size_t>(set.count) * pixelsPer);
    labels.data.resize(static_cast<std::size_t>(set.count));
    set.pixels = std::move(images.data);
    set.labels = std::move(labels.data);
    return set;
}

std::mutex g_cacheMutex;
std::map<std::tuple<std::string, std::int64_t, std::int64_t>, std::shared_ptr<const ImageDataset>> g_cache;

} // namespace

std::shared_ptr<const ImageDataset> loadFashionMnist(const fs::path& dir, std::optional<std::int64_t> trainLimit,
                                                     std::optional<std::int64_t> testLimit) {
    std::error_code ec;
    auto status = fs::status(dir, ec);
    if (ec || !fs::exists(status)) {
        throw DataError(fmt::format("{}: no such folder; expected the Fashion-MNIST IDX files there "
                                    "(install dataset-fashion-mnist, pass --data-dir, or use --data synthetic)",
                                    dir.string()));
    }
    if (!fs::is_directory(status)) {
        throw DataError(fmt::format("{}: is a file, expected a folder holding the IDX files", dir.string()));
    }
    if (::access(dir.c_str(), R_OK | X_OK) != 0) {
        throw DataError(fmt::format("{}: folder is not readable", dir.string()));
    }
    auto key = std::make_tuple(fs::weakly_canonical(dir).string(), trainLimit.value_or(-1), testLimit.value_or(-1));
    std::lock_guard lock(g_cacheMutex);
    if (auto it = g_cache.find(key); it != g_cache.end()) {
        return it->second;
    }
    auto ds = std::make_shared<ImageDataset>();
    ds->name = "Fashion-MNIST";
    ds->source = dir.string();
    ds->train = loadSplit(dir, "train", trainLimit, ds->classes);
    ds->test = loadSplit(dir, "t10k", testLimit, ds->classes);
    g_cache[key] = ds;
    return ds;
}

std::shared_ptr<const ImageDataset> syntheticFashionMnist(std::optional<std::int64_t> trainLimit,
                                                          std::optional<std::int64_t> testLimit) {
    auto ds = std::make_shared<ImageDataset>();
    ds->name = "synthetic (Fashion-MNIST shape)";
    ds->source = "synthetic";
    ds->synthetic = true;
    ds->train.count = trainLimit.value_or(60000);
    ds->test.count = testLimit.value_or(10000);
    return ds;
}

} // namespace devicerace
