#pragma once
/// Raw image-classification data as loaded from disk (bytes, not tensors), shared
/// read-only between lanes. Thread-safe after construction.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace devicerace {

struct ImageSet {
    std::int64_t count = 0;
    int channels = 1, height = 28, width = 28;
    std::vector<std::uint8_t> pixels; // count * channels * height * width, NCHW
    std::vector<std::uint8_t> labels; // count
};

struct ImageDataset {
    std::string name;            // "Fashion-MNIST"
    std::string source;          // folder it came from, or "synthetic"
    bool synthetic = false;
    int classes = 10;
    ImageSet train, test;
};

/// Default folder of Fashion-MNIST (the Debian package dataset-fashion-mnist).
std::filesystem::path defaultFashionMnistDir();

/// Loads Fashion-MNIST/MNIST IDX files (train-images-idx3-ubyte[.gz], ...) from `dir`,
/// keeping the train/test split as shipped. `trainLimit`/`testLimit` keep only the first N.
/// Results are cached per (dir, limits). Throws DataError.
std::shared_ptr<const ImageDataset> loadFashionMnist(const std::filesystem::path& dir,
                                                     std::optional<std::int64_t> trainLimit = {},
                                                     std::optional<std::int64_t> testLimit = {});

/// Shape-only description for synthetic data (generated later on the lane's device).
std::shared_ptr<const ImageDataset> syntheticFashionMnist(std::optional<std::int64_t> trainLimit = {},
                                                          std::optional<std::int64_t> testLimit = {});

} // namespace devicerace
