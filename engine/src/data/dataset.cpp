// Fashion-MNIST / MNIST from IDX files, and synthetic data descriptions.
#include "devicerace/environment.h"
#include "devicerace/dataset.h"

#include <fmt/format.h>

#include "data/data_util.h"
#include "devicerace/errors.h"
#include "devicerace/idx.h"

namespace devicerace {

namespace fs = std::filesystem;

std::int64_t DataSplit::exampleSize() const {
    std::int64_t n = 1;
    for (auto d : shape) {
        n *= d;
    }
    return n;
}

fs::path defaultFashionMnistDir() {
    if (const char* env = devicerace::environmentSwitch("DEVICERACE_FASHION_MNIST")) {
        return env;
    }
    return "/usr/share/datasets/fashion-mnist";
}

fs::path detail::findIdx(const fs::path& dir, const std::string& stem) {
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

namespace {

DataSplit loadSplit(const fs::path& dir, const std::string& prefix, std::optional<std::int64_t> limit, int classes) {
    auto imageFile = detail::findIdx(dir, prefix + "-images-idx3-ubyte");
    auto labelFile = detail::findIdx(dir, prefix + "-labels-idx1-ubyte");
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
    DataSplit set;
    set.count = images.dims[0];
    if (limit && *limit < set.count) {
        set.count = *limit;
    }
    set.shape = {1, 28, 28};
    images.data.resize(static_cast<std::size_t>(set.count * set.exampleSize()));
    set.pixels = std::move(images.data);
    set.labels.assign(labels.data.begin(), labels.data.begin() + set.count);
    return set;
}

} // namespace

std::shared_ptr<const Dataset> loadFashionMnist(const fs::path& dir, std::optional<std::int64_t> trainLimit,
                                                std::optional<std::int64_t> testLimit) {
    detail::checkFolder(dir, "the Fashion-MNIST IDX files (install dataset-fashion-mnist, pass --data-dir, or use "
                             "--data synthetic)");
    return detail::cachedLoad("idx", dir, trainLimit, testLimit, {}, [&] {
        auto ds = std::make_shared<Dataset>();
        ds->name = "Fashion-MNIST";
        ds->source = dir.string();
        ds->train = loadSplit(dir, "train", trainLimit, ds->classes);
        ds->test = loadSplit(dir, "t10k", testLimit, ds->classes);
        return ds;
    });
}

std::shared_ptr<const Dataset> syntheticDataset(DataKind kind, std::vector<std::int64_t> shape, int classes,
                                                int vocabulary, std::int64_t trainCount, std::int64_t testCount) {
    auto ds = std::make_shared<Dataset>();
    ds->name = "synthetic";
    ds->source = "synthetic";
    ds->synthetic = true;
    ds->kind = kind;
    ds->classes = classes;
    ds->vocabulary = vocabulary;
    ds->train.count = trainCount;
    ds->train.shape = shape;
    ds->test.count = testCount;
    ds->test.shape = std::move(shape);
    return ds;
}

std::shared_ptr<const Dataset> syntheticFashionMnist(std::optional<std::int64_t> trainLimit,
                                                     std::optional<std::int64_t> testLimit) {
    auto ds = std::make_shared<Dataset>(
        *syntheticDataset(DataKind::Images, {1, 28, 28}, 10, 0, trainLimit.value_or(60000), testLimit.value_or(10000)));
    ds->name = "synthetic (Fashion-MNIST shape)";
    return ds;
}

} // namespace devicerace
