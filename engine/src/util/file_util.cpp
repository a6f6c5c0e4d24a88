#include "util/file_util.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "devicerace/errors.h"

namespace devicerace::detail {

namespace fs = std::filesystem;

void checkFolder(const fs::path& dir, const std::string& what) {
    std::error_code ec;
    auto status = fs::status(dir, ec);
    if (ec || !fs::exists(status)) {
        throw DataError(fmt::format("{}: no such folder; expected {} there", dir.string(), what));
    }
    if (!fs::is_directory(status)) {
        throw DataError(fmt::format("{}: is a file, expected a folder holding {}", dir.string(), what));
    }
    if (::access(dir.c_str(), R_OK | X_OK) != 0) {
        throw DataError(fmt::format("{}: folder is not readable", dir.string()));
    }
}

std::string readFileBounded(const fs::path& file, std::uint64_t maxBytes) {
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) {
        throw DataError(fmt::format("{}: no such file", file.string()));
    }
    const auto size = fs::file_size(file, ec);
    if (ec) {
        throw DataError(fmt::format("{}: cannot read its size: {}", file.string(), ec.message()));
    }
    if (size > maxBytes) {
        throw DataError(
            fmt::format("{}: {} bytes, more than the {} this reader accepts", file.string(), size, maxBytes));
    }
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        throw DataError(fmt::format("{}: cannot open: {}", file.string(), std::strerror(errno)));
    }
    std::string bytes(size, '\0');
    in.read(bytes.data(), static_cast<std::streamsize>(size));
    if (static_cast<std::uint64_t>(in.gcount()) != size) {
        throw DataError(fmt::format("{}: read {} of {} bytes", file.string(), in.gcount(), size));
    }
    return bytes;
}

bool replaceFileBestEffort(const fs::path& file, const std::string& text) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    const auto tmp = file.parent_path() / fmt::format(".{}.{}.tmp", file.filename().string(), ::getpid());
    {
        std::ofstream out(tmp, std::ios::trunc);
        if (!out) {
            return false;
        }
        out << text;
        if (!out) {
            fs::remove(tmp, ec);
            return false;
        }
    }
    fs::rename(tmp, file, ec);
    if (ec) {
        fs::remove(tmp, ec);
        return false;
    }
    return true;
}

} // namespace devicerace::detail
