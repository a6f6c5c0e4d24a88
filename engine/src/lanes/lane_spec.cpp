#include "devicerace/lane_spec.h"

#include <fmt/format.h>

#include <charconv>
#include <cctype>
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
    case LaneKind::Parallel: return "parallel";
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

// The fault kinds a test may inject into a lane (fault=KIND[:STEP][@RANK]; STEP 0: before
// training starts, i.e. before a data-parallel rank joins its group).
bool validFault(std::string_view v) {
    if (const auto at = v.find('@'); at != std::string_view::npos) {
        std::int64_t rank = 0;
        auto r = v.substr(at + 1);
        auto [ptr, ec] = std::from_chars(r.data(), r.data() + r.size(), rank);
        if (ec != std::errc() || ptr != r.data() + r.size() || rank < 0) {
            return false;
        }
        v = v.substr(0, at);
    }
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
    return ec == std::errc() && ptr == step.data() + step.size() && n >= 0;
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
    if (!spec.members.empty() || spec.workers) {
        return LaneKind::Parallel;
    }
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
    // DEVICE, or data-parallel ranks: DEVICE+DEVICE+..., cuda:A-B, cuda:all (each may be on an ssh:// host).
    const std::string devices(trim(parts[0]));
    for (auto piece : splitString(devices, '+')) {
        LaneMember member;
        member.device = std::string(trim(piece));
        if (member.device.starts_with("ssh://")) {
            const auto slash = member.device.find('/', 6);
            if (slash == std::string::npos || slash + 1 == member.device.size()) {
                throw UsageError(fmt::format("lane '{}': expected ssh://[user@]host[:port]/DEVICE, e.g. "
                                             "ssh://gpubox/cuda:0",
                                             text));
            }
            member.host = parseSshTarget(member.device.substr(0, slash)).url();
            member.device = member.device.substr(slash + 1);
        }
        if (member.device != "cpu" && member.device != "cuda" && !member.device.starts_with("cuda:")) {
            throw UsageError(fmt::format("lane '{}': unknown device '{}' (expected cpu, cuda, cuda:N, or for a "
                                         "data-parallel lane cuda:A-B, cuda:all, DEVICE+DEVICE)",
                                         text, member.device));
        }
        if (member.device.starts_with("cuda:")) {
            const auto index = std::string_view(member.device).substr(5);
            const auto dash = index.find('-');
            if (index == "all") {
                if (!member.host.empty()) {
                    throw UsageError(fmt::format("lane '{}': cuda:all counts this machine's GPUs; on {} list them, "
                                                 "e.g. {}/cuda:0-7",
                                                 text, member.host, member.host));
                }
            } else if (dash != std::string_view::npos) {
                const auto a = parseInteger("cuda", index.substr(0, dash), text);
                const auto b = parseInteger("cuda", index.substr(dash + 1), text);
                if (a < 0 || b < a || b - a >= 1024) {
                    throw UsageError(fmt::format("lane '{}': cuda:{} is not a range A-B with A <= B", text, index));
                }
            } else {
                parseInteger("cuda", index, text);
            }
        }
        spec.members.push_back(std::move(member));
    }
    spec.device = spec.members.front().device;
    spec.host = spec.members.front().host;
    const bool grouped = spec.members.size() > 1 || spec.device == "cuda:all" ||
                         (spec.device.starts_with("cuda:") && spec.device.find('-') != std::string::npos);
    if (!grouped) {
        spec.members.clear();
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
            if (value != "devicerace" && !frameworkProgram(value)) {
                throw UsageError(fmt::format("lane '{}': framework={} (expected devicerace, pytorch, keras-jax, "
                                             "keras-tensorflow or keras-torch)",
                                             text, value));
            }
            spec.framework = std::string(value);
        } else if (key == "workers") {
            const auto v = parseInteger(key, value, text);
            if (v < 1 || v > 1024) {
                throw UsageError(fmt::format("lane '{}': workers={} is out of range (1 to 1,024)", text, v));
            }
            spec.workers = static_cast<int>(v);
        } else if (key == "backend") {
            if (value != "gloo" && value != "nccl") {
                throw UsageError(fmt::format("lane '{}': backend={} (expected gloo or nccl)", text, value));
            }
            spec.backend = std::string(value);
        } else if (key == "global_batch") {
            if (value != "fixed" && value != "scaled") {
                throw UsageError(fmt::format("lane '{}': global_batch={} (expected scaled: batch per worker, or "
                                             "fixed: batch split over the workers)",
                                             text, value));
            }
            spec.fixedGlobalBatch = value == "fixed";
        } else if (key == "master") {
            for (char c : value) {
                if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' && c != '_') {
                    throw UsageError(fmt::format("lane '{}': master={} is not a host name or address", text, value));
                }
            }
            spec.master = std::string(value);
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
                                             "optionally :STEP and, in a data-parallel lane, @RANK)",
                                             text, value));
            }
            spec.fault = std::string(value);
        } else {
            throw UsageError(fmt::format("lane '{}': unknown key '{}' (expected name, threads, batch, lr, precision, "
                                         "cost, channels_last, eval_batch, wd, momentum, schedule, lstm, data, fused, "
                                         "graph, resident, isolate, cli, fault, framework, cmd, workers, backend, global_batch or master)",
                                         text, key));
        }
    }
    if (spec.cmd && spec.framework.value_or("devicerace") != "devicerace") {
        throw UsageError(fmt::format("lane '{}': cmd= and framework= both name the program; give one", text));
    }
    const bool parallel = !spec.members.empty() || spec.workers;
    if (parallel && (spec.cmd || spec.framework.value_or("devicerace") != "devicerace")) {
        throw UsageError(fmt::format("lane '{}': data-parallel lanes run DeviceRace's engine (not framework= or cmd=)",
                                     text));
    }
    if (parallel && spec.isolate == LaneKind::Thread) {
        throw UsageError(fmt::format("lane '{}': a data-parallel lane's ranks are processes (isolate=thread does not "
                                     "apply)",
                                     text));
    }
    if (!parallel && (spec.backend || spec.fixedGlobalBatch || spec.master)) {
        throw UsageError(fmt::format("lane '{}': backend, global_batch and master apply to data-parallel lanes "
                                     "(workers=N, cuda:A-B or DEVICE+DEVICE)",
                                     text));
    }
    if (spec.backend == "nccl" && spec.device == "cpu") {
        throw UsageError(fmt::format("lane '{}': backend=nccl needs CUDA devices; CPU ranks use gloo", text));
    }
    return spec;
}

std::vector<LaneMember> laneRanks(const LaneSpec& spec) {
    if (laneKind(spec) != LaneKind::Parallel) {
        return {};
    }
    auto listed = spec.members.empty() ? std::vector<LaneMember>{{spec.host, spec.device}} : spec.members;
    std::vector<LaneMember> ranks;
    for (const auto& m : listed) {
        std::vector<LaneMember> devices;
        const auto dash = m.device.find('-');
        if (m.device.starts_with("cuda:") && dash != std::string::npos) {
            const auto a = std::stoll(m.device.substr(5, dash - 5));
            const auto b = std::stoll(m.device.substr(dash + 1));
            for (auto i = a; i <= b; ++i) {
                devices.push_back({m.host, fmt::format("cuda:{}", i)});
            }
        } else {
            devices.push_back(m);
        }
        for (const auto& d : devices) {
            for (int w = 0; w < spec.workers.value_or(1); ++w) {
                ranks.push_back(d);
            }
        }
    }
    return ranks;
}

std::optional<FrameworkProgram> frameworkProgram(std::string_view framework) {
    if (framework == "pytorch") {
        return FrameworkProgram{"pytorch_lane.py", {}, {"torch"}};
    }
    for (const char* backend : {"jax", "tensorflow", "torch"}) {
        if (framework == std::string("keras-") + backend) {
            return FrameworkProgram{"keras_lane.py", {"--backend", backend}, {"keras", backend}};
        }
    }
    return std::nullopt;
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
