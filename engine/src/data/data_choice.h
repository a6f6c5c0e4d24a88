#pragma once
// Which data a workload races on for a data mode (the one place that decides it), and how much
// of it there is without loading it: what a race is planned from. Thread-safe.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "devicerace/dataset.h"
#include "devicerace/lane_spec.h"
#include "devicerace/workload.h"

namespace devicerace::detail {

enum class DataSource { Synthetic, FashionMnist, Cifar10, Imdb, Text };

struct DataChoice {
    DataSource source = DataSource::Synthetic;
    std::filesystem::path path;      // real data: the folder or file it is read from
    std::int64_t syntheticTrain = 0; // synthetic: examples per split before limits
    std::int64_t syntheticTest = 0;
    bool adapted = false;  // Fashion-MNIST padded/resized to another network's input
    std::string note;      // said to the user when the data is not what they might assume
    TextWindows text = {}; // Text: how the corpus is cut into examples
};

/// The examples per split of a data set's synthetic stand-in (before limits): its real set's size
/// (ImageNet's validation set, IMDb's test half, a tenth of the synthetic text).
struct SyntheticSize {
    std::int64_t train = 0;
    std::int64_t test = 0;
};
/// Known data sets: cifar10, fashion-mnist, imagenet, imdb, text; others get Fashion-MNIST's.
SyntheticSize syntheticSize(const std::string& dataset);

/// Decides the data (unset mode: real where the machine has it). Throws UsageError when the
/// user asked for real data this machine cannot have without --data-dir.
DataChoice chooseData(const WorkloadInfo& workload, std::optional<DataMode> mode, const std::string& dataDir);

/// How much data a race will see, read from headers, file sizes and folder listings (a text
/// corpus is decoded: its windows depend on the characters; the load is cached for the race).
struct DataExtent {
    std::int64_t train = 0; // examples after limits
    std::int64_t test = 0;
    bool synthetic = false;
    double deviceBytes = 0; // what the data set takes on a device (pixels as uint8, token ids as int64)
    std::string note;
};
/// Throws DataError / UsageError as loading would (missing files, bad headers).
DataExtent measureData(const WorkloadInfo& workload, std::optional<DataMode> mode, const std::string& dataDir,
                       std::optional<std::int64_t> trainLimit, std::optional<std::int64_t> testLimit);

} // namespace devicerace::detail
