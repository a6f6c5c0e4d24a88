#include "data/data_util.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <tuple>

#include "devicerace/errors.h"
#include "util/file_util.h"

namespace devicerace::detail {

namespace fs = std::filesystem;

std::shared_ptr<const Dataset> cachedLoad(const std::string& kind, const fs::path& path,
                                          std::optional<std::int64_t> trainLimit, std::optional<std::int64_t> testLimit,
                                          const std::string& extra,
                                          const std::function<std::shared_ptr<Dataset>()>& load) {
    using Key = std::tuple<std::string, std::string, std::int64_t, std::int64_t, std::string>;
    static std::mutex mutex;
    static std::map<Key, std::shared_ptr<const Dataset>> cache;
    Key key{kind, fs::weakly_canonical(path).string(), trainLimit.value_or(-1), testLimit.value_or(-1), extra};
    std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) {
        return it->second;
    }
    std::shared_ptr<const Dataset> ds = load();
    cache[key] = ds;
    return ds;
}

} // namespace devicerace::detail
