#pragma once
// Where the bf16 GEMM routes chosen by measurement (kernels/bf16_routes.h) are kept: one choice per
// CPU model, thread count, LibTorch version and GEMM shape, in "bf16-routes.json" beside the GEMM
// peaks (peakCacheFile's folder). A broken or foreign file is ignored and rewritten; a file that
// cannot be written only means timing again. Torch-free header; thread-safe.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devicerace::detail {

/// bf16-routes.json beside peaks.json; empty when no cache folder can be named.
std::filesystem::path bf16RouteCacheFile();

/// The key of one shape's choice on this CPU: "<CPU model>|<threads> threads[ x <workers>
/// workers]|LibTorch <version>|<shape>".
std::string bf16RouteCacheKey(int threads, int workers, const std::string& shape);

/// The route kept for `key` ("mkl", "onednn", "fp32"), if any.
std::optional<std::string> cachedBf16Route(const std::string& key);

/// Keeps `route` for `key` with each candidate's measured seconds a call.
void keepBf16Route(const std::string& key, const std::string& route,
                   const std::vector<std::pair<std::string, double>>& secondsPerCall);

/// The choices kept for this CPU and LibTorch: per "<threads> threads[ x <workers> workers]",
/// how many shapes took each route. For `devicerace-cli devices`.
std::map<std::string, std::map<std::string, int>> cachedBf16RouteCounts();

} // namespace devicerace::detail
