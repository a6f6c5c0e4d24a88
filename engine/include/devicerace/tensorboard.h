#pragma once
/// TensorBoard event files (TFRecord framing with masked CRC-32C, brain.Event:2, scalar
/// summaries), written from a recording, and a strict reader that checks every CRC.
/// Thread-safe (pure functions over files).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "devicerace/recording.h"

namespace devicerace {

/// CRC-32C (Castagnoli), and TensorFlow's masked form of it.
std::uint32_t crc32c(const void* data, std::size_t size);
std::uint32_t maskedCrc32c(const void* data, std::size_t size);

/// One run folder per lane under `outDir` (named after the lane), each with one
/// events.out.tfevents.* file: scalars throughput/samples_per_sec, throughput/steps_per_sec,
/// loss/train and accuracy/test; step = training step, wall_time = real time.
/// Returns the event files written. Throws Error naming the path.
std::vector<std::filesystem::path> writeTensorBoard(const Recording& recording, const std::filesystem::path& outDir);

struct TfScalar {
    std::string tag;
    std::int64_t step = 0;
    double wallTime = 0;
    float value = 0;
};

struct TfEventFile {
    std::string fileVersion; // "brain.Event:2" in the first record
    std::vector<TfScalar> scalars;
    std::size_t records = 0;
};

/// Reads an event file, checking the length and data CRC of every record; throws DataError
/// naming the file and the record on any mismatch or truncation.
TfEventFile readTfEventFile(const std::filesystem::path& file);

/// DAWNBench-style TSV of a recording's evaluations: epoch, hours, top1Accuracy (percent).
std::string dawnbenchTsv(const Recording& recording, const std::string& lane);

} // namespace devicerace
