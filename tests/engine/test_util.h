#pragma once
// Helpers for engine tests: temporary folders and small IDX files written on the fly.
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace devicerace::test {

/// An environment variable set for a scope, then restored (or unset) at its end.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : m_name(name) {
        if (const char* old = std::getenv(name)) {
            m_old = old;
        }
        ::setenv(name, value, 1);
    }
    ~ScopedEnv() { m_old ? (void)::setenv(m_name, m_old->c_str(), 1) : (void)::unsetenv(m_name); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* m_name;
    std::optional<std::string> m_old;
};

/// Fast paths compared with plain LibTorch step by step: the plain (fused=false) lanes started in
/// this scope draw the fast paths' dropout masks, so both drop the same units.
inline ScopedEnv sameDropoutMasks() { return ScopedEnv("DEVICERACE_TEST_HASHED_DROPOUT", "1"); }

/// A fresh folder under the system temp dir, removed at destruction.
class TempDir {
public:
    TempDir() {
        std::random_device rd;
        m_path = std::filesystem::temp_directory_path() / ("devicerace-test-" + std::to_string(rd()));
        std::filesystem::create_directories(m_path);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(m_path, ec);
    }
    const std::filesystem::path& path() const { return m_path; }
    std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

private:
    std::filesystem::path m_path;
};

inline void putBigEndian(std::string& out, std::uint32_t v) {
    out += static_cast<char>(v >> 24);
    out += static_cast<char>(v >> 16);
    out += static_cast<char>(v >> 8);
    out += static_cast<char>(v);
}

/// The bytes of an unsigned-byte IDX file.
inline std::string idxBytes(const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& data) {
    std::string out;
    putBigEndian(out, 0x800u | static_cast<std::uint32_t>(dims.size()));
    for (auto d : dims) {
        putBigEndian(out, d);
    }
    out.append(data.begin(), data.end());
    return out;
}

inline void writeFile(const std::filesystem::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void writeGzip(const std::filesystem::path& p, const std::string& bytes) {
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
}

/// A tiny Fashion-MNIST-shaped data set: `n` images of 28x28, labels i % 10.
inline void writeTinyDataset(const std::filesystem::path& dir, std::uint32_t trainN, std::uint32_t testN,
                             bool gzip = true) {
    auto write = [&](const std::string& prefix, std::uint32_t n) {
        std::vector<std::uint8_t> px(static_cast<std::size_t>(n) * 784);
        std::vector<std::uint8_t> lb(n);
        for (std::uint32_t i = 0; i < n; ++i) {
            lb[i] = static_cast<std::uint8_t>(i % 10);
            // Each class lights a different band of rows, so the task is learnable.
            for (int r = 0; r < 28; ++r) {
                for (int c = 0; c < 28; ++c) {
                    px[i * 784 + r * 28 + c] = (r / 3 == static_cast<int>(lb[i])) ? 200 : 10;
                }
            }
        }
        auto img = idxBytes({n, 28, 28}, px);
        auto lab = idxBytes({n}, lb);
        if (gzip) {
            writeGzip(dir / (prefix + "-images-idx3-ubyte.gz"), img);
            writeGzip(dir / (prefix + "-labels-idx1-ubyte.gz"), lab);
        } else {
            writeFile(dir / (prefix + "-images-idx3-ubyte"), img);
            writeFile(dir / (prefix + "-labels-idx1-ubyte"), lab);
        }
    };
    write("train", trainN);
    write("t10k", testN);
}

} // namespace devicerace::test
