#include "devicerace/idx.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "devicerace/errors.h"

namespace devicerace {

namespace fs = std::filesystem;

namespace {

// Reads bytes from a plain or gzip file with one interface; reports errors as DataError.
class ByteSource {
public:
    ByteSource(const fs::path& file, bool gzip) : m_file(file), m_gzip(gzip) {
        if (gzip) {
            m_gz = gzopen(file.c_str(), "rb");
            if (!m_gz) {
                throw DataError(fmt::format("{}: cannot open: {}", file.string(), std::strerror(errno)));
            }
            gzbuffer(m_gz, 1 << 17);
        } else {
            m_fp = std::fopen(file.c_str(), "rb");
            if (!m_fp) {
                throw DataError(fmt::format("{}: cannot open: {}", file.string(), std::strerror(errno)));
            }
        }
    }
    ~ByteSource() {
        if (m_gz) {
            gzclose(m_gz);
        }
        if (m_fp) {
            std::fclose(m_fp);
        }
    }
    ByteSource(const ByteSource&) = delete;
    ByteSource& operator=(const ByteSource&) = delete;

    // Reads up to n bytes; returns how many were read (fewer only at end of data).
    std::size_t read(void* out, std::size_t n) {
        auto* dst = static_cast<unsigned char*>(out);
        std::size_t done = 0;
        while (done < n) {
            if (m_gz) {
                // gzread takes an unsigned count: read in chunks below 1 GiB.
                unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
                int got = gzread(m_gz, dst + done, chunk);
                if (got < 0) {
                    int code = 0;
                    const char* msg = gzerror(m_gz, &code);
                    throw DataError(fmt::format("{}: corrupt gzip data ({})", m_file.string(), msg ? msg : "?"));
                }
                if (got == 0) {
                    // A truncated stream reads as end of data; gzerror tells the two apart.
                    int code = 0;
                    const char* msg = gzerror(m_gz, &code);
                    if (code != Z_OK && code != Z_STREAM_END) {
                        throw DataError(fmt::format("{}: corrupt gzip data ({})", m_file.string(), msg ? msg : "?"));
                    }
                    break;
                }
                done += static_cast<std::size_t>(got);
            } else {
                std::size_t got = std::fread(dst + done, 1, n - done, m_fp);
                if (got == 0) {
                    if (std::ferror(m_fp)) {
                        throw DataError(fmt::format("{}: read error: {}", m_file.string(), std::strerror(errno)));
                    }
                    break;
                }
                done += got;
            }
        }
        return done;
    }

private:
    fs::path m_file;
    bool m_gzip;
    gzFile m_gz = nullptr;
    std::FILE* m_fp = nullptr;
};

std::uint32_t bigEndian(const unsigned char* p) {
    return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
}

bool looksGzipped(const fs::path& file) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(file.c_str(), "rb"), &std::fclose);
    if (!fp) {
        throw DataError(fmt::format("{}: cannot open: {}", file.string(), std::strerror(errno)));
    }
    unsigned char head[2] = {0, 0};
    auto got = std::fread(head, 1, 2, fp.get());
    return got == 2 && head[0] == 0x1f && head[1] == 0x8b;
}

} // namespace

namespace {

struct OpenedIdx {
    bool gzip = false;
    std::uintmax_t size = 0; // bytes on disk
};

// The checks every IDX read starts with: the file exists, is regular, not empty, and its name
// says what its content is (gzip or not).
OpenedIdx checkIdxFile(const fs::path& file) {
    const auto name = file.string();
    std::error_code ec;
    auto status = fs::status(file, ec);
    if (ec || !fs::exists(status)) {
        throw DataError(fmt::format("{}: no such file", name));
    }
    if (!fs::is_regular_file(status)) {
        throw DataError(fmt::format("{}: not a regular file", name));
    }
    auto size = fs::file_size(file, ec);
    if (ec) {
        throw DataError(fmt::format("{}: cannot read its size: {}", name, ec.message()));
    }
    if (size == 0) {
        throw DataError(fmt::format("{}: the file is empty (0 bytes); expected an IDX file", name));
    }
    const bool namedGz = file.extension() == ".gz";
    const bool gzip = looksGzipped(file);
    if (namedGz && !gzip) {
        throw DataError(fmt::format("{}: named .gz but not gzip-compressed; rename it without .gz", name));
    }
    if (!namedGz && gzip) {
        throw DataError(
            fmt::format("{}: still gzip-compressed; gunzip it or name it {}.gz", name, file.filename().string()));
    }
    return {gzip, size};
}

// The magic and the dimensions (capped: a hostile header must not make us allocate gigabytes).
std::vector<std::uint32_t> readHeader(ByteSource& in, const std::string& name, int expectedDims) {
    unsigned char header[4];
    if (in.read(header, 4) != 4) {
        throw DataError(fmt::format("{}: truncated header: the file ends before the 4-byte IDX magic", name));
    }
    const std::uint32_t magic = bigEndian(header);
    const std::uint32_t expectedMagic = 0x800u | static_cast<std::uint32_t>(expectedDims);
    if (magic != expectedMagic) {
        throw DataError(fmt::format("{}: wrong magic number 0x{:08x}, expected 0x{:08x} (unsigned-byte IDX with {} "
                                    "dimension{})",
                                    name, magic, expectedMagic, expectedDims, expectedDims == 1 ? "" : "s"));
    }
    std::vector<std::uint32_t> dims;
    std::uint64_t elements = 1;
    for (int d = 0; d < expectedDims; ++d) {
        unsigned char raw[4];
        if (in.read(raw, 4) != 4) {
            throw DataError(fmt::format("{}: truncated header: the file ends inside dimension {} of {}", name, d + 1,
                                        expectedDims));
        }
        auto dim = bigEndian(raw);
        if (dim == 0) {
            throw DataError(fmt::format("{}: dimension {} is 0; expected at least 1", name, d + 1));
        }
        elements *= dim;
        if (elements > kIdxMaxElements) {
            throw DataError(fmt::format("{}: the header claims more than {} elements (dimension {} is {}); "
                                        "refusing to allocate",
                                        name, kIdxMaxElements, d + 1, dim));
        }
        dims.push_back(dim);
    }
    return dims;
}

} // namespace

std::vector<std::uint32_t> readIdxDims(const fs::path& file, int expectedDims) {
    const auto opened = checkIdxFile(file);
    ByteSource in(file, opened.gzip);
    return readHeader(in, file.string(), expectedDims);
}

IdxArray readIdx(const fs::path& file, int expectedDims) {
    const auto name = file.string();
    const auto opened = checkIdxFile(file);
    const bool gzip = opened.gzip;
    const auto size = opened.size;
    ByteSource in(file, gzip);
    IdxArray out;
    out.dims = readHeader(in, name, expectedDims);
    std::uint64_t elements = 1;
    for (auto d : out.dims) {
        elements *= d;
    }
    const std::uint64_t headerBytes = 4 + 4 * static_cast<std::uint64_t>(expectedDims);
    if (!gzip && size != headerBytes + elements) {
        throw DataError(fmt::format("{}: {} bytes, but its header ({}) needs exactly {} bytes{}", name, size,
                                    fmt::join(out.dims, "x"), headerBytes + elements,
                                    size < headerBytes + elements ? " (truncated)" : " (trailing data)"));
    }
    std::uint64_t got = 0;
    if (gzip) {
        // A gzip stream's length is known only by inflating it: grow with the data that is
        // there, so a 40-byte file whose header claims 2^30 elements does not allocate and
        // zero a gigabyte before finding it truncated (found by fuzzing).
        constexpr std::uint64_t kChunk = 1u << 20;
        while (got < elements) {
            const auto want = std::min(kChunk, elements - got);
            out.data.resize(got + want);
            const auto n = in.read(out.data.data() + got, want);
            got += n;
            if (n < want) {
                out.data.resize(got);
                break;
            }
        }
    } else {
        out.data.resize(elements);
        got = in.read(out.data.data(), elements);
    }
    if (got != elements) {
        throw DataError(fmt::format("{}: truncated: the header ({}) needs {} data bytes, the file has {}", name,
                                    fmt::join(out.dims, "x"), elements, got));
    }
    unsigned char extra;
    if (in.read(&extra, 1) != 0) {
        throw DataError(fmt::format("{}: trailing data after the {} bytes its header ({}) describes", name, elements,
                                    fmt::join(out.dims, "x")));
    }
    return out;
}

} // namespace devicerace
