#include "devicerace/tensorboard.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <fstream>

#include "util/file_util.h"
#include "devicerace/errors.h"
#include "devicerace/exports.h"

namespace devicerace {

namespace fs = std::filesystem;

namespace {

const std::array<std::uint32_t, 256>& crcTable() {
    static const auto table = [] {
        std::array<std::uint32_t, 256> t{};
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int k = 0; k < 8; ++k) {
                c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1; // Castagnoli, reflected
            }
            t[i] = c;
        }
        return t;
    }();
    return table;
}

// Protocol-buffer encoding of the few Event/Summary fields TensorBoard needs.
void varint(std::string& out, std::uint64_t v) {
    while (v >= 0x80) {
        out += static_cast<char>((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out += static_cast<char>(v);
}
void key(std::string& out, int field, int wire) { varint(out, static_cast<std::uint64_t>(field << 3 | wire)); }
void bytesField(std::string& out, int field, const std::string& bytes) {
    key(out, field, 2);
    varint(out, bytes.size());
    out += bytes;
}
template <typename T>
void fixed(std::string& out, int field, int wire, T v) {
    key(out, field, wire);
    char raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T)); // little-endian hosts only (x86-64, arm64)
    out.append(raw, sizeof(T));
}

std::string eventHeader(double wallTime, std::int64_t step) {
    std::string e;
    fixed(e, 1, 1, wallTime); // double wall_time = 1
    key(e, 2, 0);             // int64 step = 2
    varint(e, static_cast<std::uint64_t>(step));
    return e;
}

std::string scalarEvent(double wallTime, std::int64_t step, const std::string& tag, float value) {
    std::string v;
    bytesField(v, 1, tag); // Summary.Value.tag = 1
    fixed(v, 2, 5, value); // Summary.Value.simple_value = 2
    std::string summary;
    bytesField(summary, 1, v); // Summary.value = 1
    std::string e = eventHeader(wallTime, step);
    bytesField(e, 5, summary); // Event.summary = 5
    return e;
}

void appendRecord(std::string& out, const std::string& data) {
    const std::uint64_t len = data.size();
    char header[8];
    std::memcpy(header, &len, 8);
    const std::uint32_t lenCrc = maskedCrc32c(header, 8);
    const std::uint32_t dataCrc = maskedCrc32c(data.data(), data.size());
    out.append(header, 8);
    out.append(reinterpret_cast<const char*>(&lenCrc), 4);
    out += data;
    out.append(reinterpret_cast<const char*>(&dataCrc), 4);
}

std::string safeName(const std::string& name) {
    std::string out;
    for (unsigned char c : name) {
        out += (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c >= 0x80) ? static_cast<char>(c) : '_';
    }
    return out.empty() ? "lane" : out;
}

// Reads a varint from [p, end); throws on truncation.
std::uint64_t readVarint(const unsigned char*& p, const unsigned char* end) {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end) {
            throw DataError("truncated varint");
        }
        const unsigned char b = *p++;
        v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            return v;
        }
    }
    throw DataError("varint too long");
}

// Calls f(field, wire, value-or-length, pointer) for each field of a message.
template <typename F>
void fields(const unsigned char* p, const unsigned char* end, F&& f) {
    while (p < end) {
        const auto k = readVarint(p, end);
        const int field = static_cast<int>(k >> 3), wire = static_cast<int>(k & 7);
        if (wire == 0) {
            f(field, wire, readVarint(p, end), p);
        } else if (wire == 1 || wire == 5) {
            const std::size_t n = wire == 1 ? 8 : 4;
            if (static_cast<std::size_t>(end - p) < n) {
                throw DataError("truncated fixed field");
            }
            f(field, wire, n, p);
            p += n;
        } else if (wire == 2) {
            const auto n = readVarint(p, end);
            if (n > static_cast<std::uint64_t>(end - p)) {
                throw DataError("truncated length-delimited field");
            }
            f(field, wire, n, p);
            p += n;
        } else {
            throw DataError(fmt::format("unsupported wire type {}", wire));
        }
    }
}

} // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
    const auto& t = crcTable();
    std::uint32_t c = 0xFFFFFFFFu;
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
        c = t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

std::uint32_t maskedCrc32c(const void* data, std::size_t size) {
    const std::uint32_t c = crc32c(data, size);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::vector<fs::path> writeTensorBoard(const Recording& r, const fs::path& outDir) {
    std::vector<fs::path> written;
    std::error_code ec;
    fs::create_directories(outDir, ec);
    if (ec || !fs::is_directory(outDir)) {
        throw Error(fmt::format("{}: cannot create the TensorBoard folder: {}", outDir.string(),
                                ec ? ec.message() : "not a folder"));
    }
    for (const auto& lane : r.lanes) {
        const auto& samples = r.samples.at(lane.name);
        const double start = samples.empty() ? 0.0 : samples.front().wallTime;
        std::string out;
        std::string first = eventHeader(start, 0);
        bytesField(first, 3, "brain.Event:2"); // Event.file_version = 3
        appendRecord(out, first);
        std::optional<double> flops, peak; // from the lane's "running" state sample
        for (const auto& s : samples) {
            if (s.kind == SampleKind::State) {
                flops = s.flopsPerSample ? s.flopsPerSample : flops;
                peak = s.peakFlopsPerSec ? s.peakFlopsPerSec : peak;
            }
            if (s.kind == SampleKind::Train) {
                // Explaining the race: where a step's time goes (ms per phase), the share of the
                // device's peak, the learning rate.
                for (const auto& [phase, secs] : s.stepBreakdown) {
                    appendRecord(out,
                                 scalarEvent(s.wallTime, s.step, "step_ms/" + phase, static_cast<float>(secs * 1e3)));
                }
                if (flops && peak && *peak > 0 && s.samplesPerSec && !s.warmup) {
                    appendRecord(out,
                                 scalarEvent(s.wallTime, s.step, "utilization/of_peak",
                                             static_cast<float>(std::min(1.0, *flops * *s.samplesPerSec / *peak))));
                }
                if (s.lr) {
                    appendRecord(out, scalarEvent(s.wallTime, s.step, "train/lr", static_cast<float>(*s.lr)));
                }
                if (s.energyJoules) {
                    appendRecord(out, scalarEvent(s.wallTime, s.step, "energy/joules_per_interval",
                                                  static_cast<float>(*s.energyJoules)));
                }
                if (s.samplesPerSec) {
                    appendRecord(out, scalarEvent(s.wallTime, s.step, "throughput/samples_per_sec",
                                                  static_cast<float>(*s.samplesPerSec)));
                }
                if (s.stepsPerSec) {
                    appendRecord(out, scalarEvent(s.wallTime, s.step, "throughput/steps_per_sec",
                                                  static_cast<float>(*s.stepsPerSec)));
                }
                if (s.loss) {
                    appendRecord(out, scalarEvent(s.wallTime, s.step, "loss/train", static_cast<float>(*s.loss)));
                }
            } else if (s.kind == SampleKind::Eval && s.accuracy) {
                appendRecord(out, scalarEvent(s.wallTime, s.step, "accuracy/test", static_cast<float>(*s.accuracy)));
            }
        }
        const auto dir = outDir / safeName(lane.name);
        fs::create_directories(dir, ec);
        const auto file = dir / fmt::format("events.out.tfevents.{}.{}.devicerace", static_cast<long long>(start),
                                            safeName(r.machine.hostName.empty() ? "host" : r.machine.hostName));
        writeFileAtomically(file, out);
        written.push_back(file);
    }
    return written;
}

TfEventFile readTfEventFile(const fs::path& file) {
    const std::string bytes = detail::readFileBounded(file, 1ull << 30);
    TfEventFile out;
    std::size_t pos = 0;
    while (pos < bytes.size()) {
        const auto where = [&](const std::string& what) {
            return DataError(fmt::format("{}: record {} at byte {}: {}", file.string(), out.records + 1, pos, what));
        };
        if (bytes.size() - pos < 12) {
            throw where("truncated record header");
        }
        std::uint64_t len;
        std::uint32_t lenCrc;
        std::memcpy(&len, bytes.data() + pos, 8);
        std::memcpy(&lenCrc, bytes.data() + pos + 8, 4);
        if (maskedCrc32c(bytes.data() + pos, 8) != lenCrc) {
            throw where("length CRC mismatch");
        }
        if (len > bytes.size() - pos - 12 || bytes.size() - pos - 12 - len < 4) {
            throw where("truncated record data");
        }
        const char* data = bytes.data() + pos + 12;
        std::uint32_t dataCrc;
        std::memcpy(&dataCrc, data + len, 4);
        if (maskedCrc32c(data, len) != dataCrc) {
            throw where("data CRC mismatch");
        }
        // Decode the Event: wall_time, step, file_version or summary scalars.
        double wall = 0;
        std::int64_t step = 0;
        const auto* p = reinterpret_cast<const unsigned char*>(data);
        std::vector<std::pair<std::string, float>> values;
        try {
            fields(p, p + len, [&](int f, int wire, std::uint64_t v, const unsigned char* q) {
                if (f == 1 && wire == 1) {
                    std::memcpy(&wall, q, 8);
                } else if (f == 2 && wire == 0) {
                    step = static_cast<std::int64_t>(v);
                } else if (f == 3 && wire == 2) {
                    out.fileVersion.assign(reinterpret_cast<const char*>(q), v);
                } else if (f == 5 && wire == 2) {
                    fields(q, q + v, [&](int sf, int sw, std::uint64_t sv, const unsigned char* sq) {
                        if (sf != 1 || sw != 2) {
                            return;
                        }
                        std::string tag;
                        float value = 0;
                        fields(sq, sq + sv, [&](int vf, int vw, std::uint64_t vv, const unsigned char* vq) {
                            if (vf == 1 && vw == 2) {
                                tag.assign(reinterpret_cast<const char*>(vq), vv);
                            } else if (vf == 2 && vw == 5) {
                                std::memcpy(&value, vq, 4);
                            }
                        });
                        values.emplace_back(tag, value);
                    });
                }
            });
        } catch (const DataError& e) {
            throw where(fmt::format("malformed event ({})", e.what()));
        }
        for (auto& [tag, value] : values) {
            out.scalars.push_back({tag, step, wall, value});
        }
        ++out.records;
        pos += 12 + len + 4;
    }
    return out;
}

std::string dawnbenchTsv(const Recording& r, const std::string& lane) {
    std::string out = "epoch\thours\ttop1Accuracy\n";
    for (const auto& s : r.samples.at(lane)) {
        if (s.kind == SampleKind::Eval && s.accuracy) {
            out += fmt::format("{:.4f}\t{:.6f}\t{:.2f}\n", s.epoch, s.time / 3600.0, *s.accuracy * 100.0);
        }
    }
    return out;
}

} // namespace devicerace
