#pragma once
// Folder checks and bounded whole-file reads for every reader of the engine (data sets, recordings, presets,
// TensorBoard files). Thread-safe.
#include <cstdint>
#include <filesystem>
#include <string>

namespace devicerace::detail {

/// Throws DataError unless `dir` is an existing, readable folder (`what`: what belongs there).
void checkFolder(const std::filesystem::path& dir, const std::string& what);

/// Reads a whole regular file of at most `maxBytes`; throws DataError naming it otherwise.
std::string readFileBounded(const std::filesystem::path& file, std::uint64_t maxBytes);

/// Best effort, for caches: writes `text` to a temporary file beside `file` (its folder created)
/// and renames it over `file`, so a reader never sees half a file. False where that failed.
bool replaceFileBestEffort(const std::filesystem::path& file, const std::string& text);

} // namespace devicerace::detail
