#pragma once
/// A strict reader for IDX files (MNIST / Fashion-MNIST), plain or gzipped.
/// Validates magic, dimensions (capped before allocating) and the exact size. Thread-safe.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace devicerace {

struct IdxArray {
    std::vector<std::uint32_t> dims; // e.g. {60000, 28, 28} or {60000}
    std::vector<std::uint8_t> data;  // row-major, unsigned bytes
    std::int64_t count() const { return dims.empty() ? 0 : dims[0]; }
};

/// Largest element count accepted (guards against allocation bombs): 1 GiB.
inline constexpr std::uint64_t kIdxMaxElements = 1ull << 30;

/// Reads an unsigned-byte IDX file with `expectedDims` dimensions (3 for images, 1 for labels).
/// Gzip is detected from the content, not the name. Throws DataError naming the file.
IdxArray readIdx(const std::filesystem::path& file, int expectedDims);

/// Only the header's dimensions (e.g. {60000, 28, 28}), with the same checks as readIdx on the
/// name, magic and dimension caps: how a race is planned without loading its data.
std::vector<std::uint32_t> readIdxDims(const std::filesystem::path& file, int expectedDims);

} // namespace devicerace
