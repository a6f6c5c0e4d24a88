#include "devicerace/lane_spec.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <string_view>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "util/text_util.h"

namespace devicerace {

std::string toString(Precision p) {
    switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
    }
    return "?";
}

std::string toString(LaneKind k) {
    switch (k) {
    case LaneKind::Thread: return "thread";
    case LaneKind::Process: return "process";
    case LaneKind::Remote: return "remote";
    case LaneKind::External: return "external";
    }
    return "?";
}

std::string toString(DataMode m) { return m == DataMode::Real ? "real" : "synthetic"; }

namespace {

std::int64_t parseInteger(std::string_view key, std::string_view value, const std::string& spec) {
    std::int64_t out = 0;
    const auto* end = value.data() + value.size();
    auto [ptr, ec] = std::from_chars(value.data(), end, out);
    if (ec != std::errc() || ptr != end) {
        throw UsageError(fmt::format("lane '{}': {}={} is not an integer", spec, key, value));
    }
    return out;
}

double parseNumber(std::string_view key, std::string_view value, const std::string& spec) {
    try {
        std::size_t used = 0;
        double out = std::stod(std::string(value), &used);
        if (used == value.size()) {
            return out;
        }
    } catch (const std::exception&) {
    }
    throw UsageError(fmt::format("lane '{}': {}={} is not a number", spec, key, value));
}

bool parseBool(std::string_view key, std::string_view value, const std::string& spec) {
    if (value == "true" || value == "1" || value == "yes") {
        return true;
    }
    if (value == "false" || value == "0" || value == "no") {
        return false;
    }
    throw UsageError(fmt::format("lane '{}': {}={} (expected true or false)", spec, key, value));
}

// Characters allowed in an ssh user or host: what DNS names, addresses ([v6] too) and
// ~/.ssh/config aliases use; nothing a shell or ssh's option parser would act on.
bool sshNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_' || c == ':' || c == '[' || c == ']';
}

// The fault kinds a test may inject into a lane (fault=KIND[:STEP]).
bool validFault(std::string_view v) {
    auto kind = v.substr(0, v.find(':'));
    if (kind != "throw" && kind != "abort" && kind != "segv" && kind != "exit" && kind != "hang") {
        return false;
    }
    if (kind.size() == v.size()) {
        return true;
    }
    auto step = v.substr(kind.size() + 1);
    std::int64_t n = 0;
    auto [ptr, ec] = std::from_chars(step.data(), step.data() + step.size(), n);
    return ec == std::errc() && ptr == step.data() + step.size() && n >= 1;
}

} // namespace

std::string SshTarget::url() const {
    std::string out = "ssh://";
    if (!user.empty()) {
        out += user + "@";
    }
    out += host;
    if (port) {
        out += fmt::format(":{}", *port);
    }
    return out;
}

SshTarget parseSshTarget(const std::string& text) {
    constexpr std::string_view kScheme = "ssh://";
    if (!text.starts_with(kScheme)) {
        throw UsageError(fmt::format("'{}': expected ssh://[user@]host[:port]", text));
    }
    std::string_view rest = std::string_view(text).substr(kScheme.size());
    if (!rest.empty() && rest.back() == '/') {
        rest.remove_suffix(1);
    }
    SshTarget t;
    if (auto at = rest.find('@'); at != std::string_view::npos) {
        t.user = std::string(rest.substr(0, at));
        rest = rest.substr(at + 1);
        if (t.user.empty()) {
            throw UsageError(fmt::format("'{}': empty user name before '@'", text));
        }
    }
    // host[:port], or [v6]:port (an address in brackets may hold colons itself)
    std::size_t colon = std::string_view::npos;
    if (!rest.empty() && rest.front() == '[') {
        const auto close = rest.find(']');
        if (close != std::string_view::npos && close + 1 < rest.size() && rest[close + 1] == ':') {
            colon = close + 1;
        }
    } else if (rest.find(':') != std::string_view::npos && rest.find(':') == rest.rfind(':')) {
        colon = rest.find(':');
    }
    if (colon != std::string_view::npos) {
        auto portText = rest.substr(colon + 1);
        int port = 0;
        auto [ptr, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
        if (ec != std::errc() || ptr != portText.data() + portText.size() || port < 1 || port > 65535) {
            throw UsageError(fmt::format("'{}': port '{}' is not a number from 1 to 65535", text, portText));
        }
        t.port = port;
        rest = rest.substr(0, colon);
    }
    t.host = std::string(rest);
    if (t.host.empty()) {
        throw UsageError(fmt::format("'{}': no host name", text));
    }
    if (t.host.front() == '-' || (!t.user.empty() && t.user.front() == '-')) {
        throw UsageError(fmt::format("'{}': a host or user may not start with '-' (ssh would read it as an option)",
                                     text));
    }
    for (char c : t.host + t.user) {
        if (!sshNameChar(c)) {
            throw UsageError(fmt::format("'{}': '{}' is not allowed in an ssh host or user name", text,
                                         c < 0x20 || c == 0x7f ? std::string("a control character") : std::string(1, c)));
        }
    }
    return t;
}

LaneKind laneKind(const LaneSpec& spec) {
    if (!spec.host.empty()) {
        return LaneKind::Remote;
    }
    if (spec.cmd || spec.framework.value_or("devicerace") != "devicerace") {
        return LaneKind::External;
    }
    return spec.isolate.value_or(LaneKind::Thread);
}

LaneSpec parseLaneSpec(const std::string& text) {
    auto parts = splitString(text, ',');
    if (parts.empty() || trim(parts[0]).empty()) {
        throw UsageError(fmt::format("lane '{}': expected DEVICE[,key=value]... with DEVICE cpu, cuda or cuda:N", text));
    }
    LaneSpec spec;
    spec.device = std::string(trim(parts[0]));
    if (spec.device.starts_with("ssh://")) {
        const auto slash = spec.device.find('/', 6);
        if (slash == std::string::npos || slash + 1 == spec.device.size()) {
            throw UsageError(fmt::format("lane '{}': expected ssh://[user@]host[:port]/DEVICE, e.g. "
                                         "ssh://gpubox/cuda:0",
                                         text));
        }
        spec.host = parseSshTarget(spec.device.substr(0, slash)).url();
        spec.device = spec.device.substr(slash + 1);
    }
    if (spec.device != "cpu" && spec.device != "cuda" && !spec.device.starts_with("cuda:")) {
        throw UsageError(fmt::format("lane '{}': unknown device '{}' (expected cpu, cuda or cuda:N)", text, spec.device));
    }
    if (spec.device.starts_with("cuda:")) {
        parseInteger("cuda", std::string_view(spec.device).substr(5), text);
    }
    for (std::size_t i = 1; i < parts.size(); ++i) {
        auto part = trim(parts[i]);
        auto eq = part.find('=');
        if (eq == std::string_view::npos || eq == 0) {
            throw UsageError(fmt::format("lane '{}': '{}' is not key=value", text, part));
        }
        auto key = trim(part.substr(0, eq));
        auto value = trim(part.substr(eq + 1));
        if (value.empty()) {
            throw UsageError(fmt::format("lane '{}': {} has no value", text, key));
        }
        if (key == "name") {
            spec.name = std::string(value);
        } else if (key == "threads") {
            auto v = parseInteger(key, value, text);
            if (v < 1 || v > 1024) {
                throw UsageError(fmt::format("lane '{}': threads={} is out of range (1 to the cores present)", text, v));
            }
            spec.threads = static_cast<int>(v);
        } else if (key == "batch") {
            auto v = parseInteger(key, value, text);
            if (v < 1) {
                throw UsageError(fmt::format("lane '{}': batch={} must be at least 1", text, v));
            }
            spec.batch = v;
        } else if (key == "lr") {
            double v = parseNumber(key, value, text);
            if (!std::isfinite(v) || v <= 0) {
                throw UsageError(fmt::format("lane '{}': lr={} must be a finite number above 0", text, value));
            }
            spec.lr = v;
        } else if (key == "precision") {
            if (value == "fp32") {
                spec.precision = Precision::Fp32;
            } else if (value == "bf16") {
                spec.precision = Precision::Bf16;
            } else if (value == "fp16") {
                spec.precision = Precision::Fp16;
            } else {
                throw UsageError(fmt::format("lane '{}': precision={} (expected fp32, bf16 or fp16)", text, value));
            }
        } else if (key == "cost") {
            double v = parseNumber(key, value, text);
            if (!std::isfinite(v) || v < 0) {
                throw UsageError(fmt::format("lane '{}': cost={} must be USD per hour, 0 or more", text, value));
            }
            spec.costPerHour = v;
        } else if (key == "channels_last") {
            spec.channelsLast = parseBool(key, value, text);
        } else if (key == "eval_batch") {
            auto v = parseInteger(key, value, text);
            if (v < 1) {
                throw UsageError(fmt::format("lane '{}': eval_batch={} must be at least 1", text, v));
            }
            spec.evalBatch = v;
        } else if (key == "wd" || key == "momentum") {
            double v = parseNumber(key, value, text);
            if (!std::isfinite(v) || v < 0 || (key == "momentum" && v >= 1)) {
                throw UsageError(fmt::format("lane '{}': {}={} must be {}", text, key, value,
                                             key == "wd" ? "a finite number, 0 or more" : "in [0, 1)"));
            }
            (key == "wd" ? spec.weightDecay : spec.momentum) = v;
        } else if (key == "schedule") {
            if (value != "constant" && value != "step" && value != "onecycle") {
                throw UsageError(fmt::format("lane '{}': schedule={} (expected constant, step or onecycle)", text, value));
            }
            spec.schedule = std::string(value);
        } else if (key == "lstm") {
            if (value != "fused" && value != "cells") {
                throw UsageError(fmt::format("lane '{}': lstm={} (expected fused or cells)", text, value));
            }
            spec.lstm = std::string(value);
        } else if (key == "data") {
            if (value != "real" && value != "synthetic") {
                throw UsageError(fmt::format("lane '{}': data={} (expected real or synthetic)", text, value));
            }
            spec.data = value == "real" ? DataMode::Real : DataMode::Synthetic;
        } else if (key == "fused") {
            spec.fused = parseBool(key, value, text);
        } else if (key == "graph") {
            spec.graph = parseBool(key, value, text);
        } else if (key == "resident") {
            spec.resident = parseBool(key, value, text);
        } else if (key == "isolate") {
            if (value != "thread" && value != "process") {
                throw UsageError(fmt::format("lane '{}': isolate={} (expected thread or process)", text, value));
            }
            spec.isolate = value == "thread" ? LaneKind::Thread : LaneKind::Process;
        } else if (key == "cli") {
            for (char c : value) {
                if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                    throw UsageError(fmt::format("lane '{}': cli= holds a control character", text));
                }
            }
            spec.cli = std::string(value);
        } else if (key == "framework") {
            if (value != "devicerace" && value != "pytorch") {
                throw UsageError(fmt::format("lane '{}': framework={} (expected devicerace or pytorch{})", text, value,
                                             value.starts_with("keras")
                                                 ? "; the Keras lanes are not built yet"
                                                 : ""));
            }
            spec.framework = std::string(value);
        } else if (key == "cmd") {
            for (char c : value) {
                if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                    throw UsageError(fmt::format("lane '{}': cmd= holds a control character", text));
                }
            }
            spec.cmd = std::string(value);
        } else if (key == "fault") {
            if (!validFault(value)) {
                throw UsageError(fmt::format("lane '{}': fault={} (expected throw, abort, segv, exit or hang, "
                                             "optionally :STEP)",
                                             text, value));
            }
            spec.fault = std::string(value);
        } else {
            throw UsageError(fmt::format("lane '{}': unknown key '{}' (expected name, threads, batch, lr, precision, "
                                         "cost, channels_last, eval_batch, wd, momentum, schedule, lstm, data, fused, "
                                         "graph, resident, isolate, cli, fault, framework or cmd)",
                                         text, key));
        }
    }
    if (spec.cmd && spec.framework.value_or("devicerace") != "devicerace") {
        throw UsageError(fmt::format("lane '{}': cmd= and framework= both name the program; give one", text));
    }
    if ((spec.cmd || spec.framework.value_or("devicerace") != "devicerace") && !spec.host.empty()) {
        throw UsageError(fmt::format("lane '{}': framework and cmd lanes run on this machine for now (not over ssh)",
                                     text));
    }
    return spec;
}

std::vector<LaneSpec> defaultLanes() {
    const auto& report = deviceReport();
    LaneSpec one;
    one.threads = 1;
    if (report.cudaAvailable && !report.gpus.empty()) {
        LaneSpec gpu;
        gpu.device = "cuda:0";
        return {one, gpu};
    }
    LaneSpec all;
    all.threads = std::max(1, report.cpu.physicalCores);
    return {one, all};
}

} // namespace devicerace
