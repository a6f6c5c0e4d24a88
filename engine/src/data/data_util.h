#pragma once
// Helpers shared by the data readers: IDX names, a load cache (folder checks and bounded file
// reads: util/file_util.h).
// Thread-safe.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "devicerace/dataset.h"
#include "util/file_util.h"

namespace devicerace::detail {

/// The IDX file `stem` in `dir`, plain or .gz, as shipped by zalandoresearch and the Debian
/// package; throws DataError naming what is missing.
std::filesystem::path findIdx(const std::filesystem::path& dir, const std::string& stem);

/// Loads once per (kind, path, limits, extra) and shares the result between lanes and races.
std::shared_ptr<const Dataset> cachedLoad(const std::string& kind, const std::filesystem::path& path,
                                          std::optional<std::int64_t> trainLimit, std::optional<std::int64_t> testLimit,
                                          const std::string& extra,
                                          const std::function<std::shared_ptr<Dataset>()>& load);

} // namespace devicerace::detail
