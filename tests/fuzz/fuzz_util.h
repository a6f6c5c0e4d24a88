#pragma once
// Helpers shared by the fuzz drivers: one scratch folder per process (on tmpfs when there is
// one) for the parsers that read files, rewritten for every input.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace devicerace::fuzz {

/// Fake device report with or without GPUs (fuzz_shim.cpp).
void setFakeGpus(bool withGpus);

/// The process's scratch folder, created on first use, removed at exit.
inline const std::filesystem::path& scratchDir() {
    // Never destroyed: the exit handler below still needs it.
    static const auto* dir = [] {
        std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
        if (const char* t = std::getenv("FUZZ_SCRATCH")) {
            base = t;
        }
        std::string templ = base + "/devicerace-fuzz-XXXXXX";
        if (!::mkdtemp(templ.data())) {
            std::abort();
        }
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(scratchDir(), ec);
        });
        return new std::filesystem::path(templ);
    }();
    return *dir;
}

/// Writes `bytes` to `file` (replacing it).
inline void writeFile(const std::filesystem::path& file, std::string_view bytes) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
        std::abort();
    }
}

inline std::string_view asView(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

} // namespace devicerace::fuzz
