#include "devicerace/lane_spec.h"

#include <fmt/format.h>

#include <charconv>
#include <cctype>
#include <cmath>
#include <string_view>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "lanes/lane_fields.h"
#include "lanes/lane_key_table.h"
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
    case LaneKind::Slurm: return "slurm";
    case LaneKind::Attached: return "attached";
    }
    return "?";
}

std::string toString(DataMode m) { return m == DataMode::Real ? "real" : "synthetic"; }

namespace {

// Characters allowed in an ssh user or host: what DNS names, addresses ([v6] too) and
// ~/.ssh/config aliases use; nothing a shell or ssh's option parser would act on.
bool sshNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_' || c == ':' || c == '[' || c == ']';
}

// attach://HOST:PORT's address: a host name or address (IPv6 in brackets) and a port.
std::string parseAttachAddress(const std::string& target, const std::string& text) {
    const auto colon = target.rfind(':');
    if (colon == std::string::npos || colon == 0) {
        throw UsageError(fmt::format("lane '{}': attach:// needs HOST:PORT, the port rank 0 of the job listens on "
                                     "(devicerace-cli worker --listen)",
                                     text));
    }
    const auto host = target.substr(0, colon);
    const auto portText = target.substr(colon + 1);
    int port = 0;
    auto [ptr, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
    if (ec != std::errc() || ptr != portText.data() + portText.size() || port < 1 || port > 65535) {
        throw UsageError(fmt::format("lane '{}': attach:// port '{}' is not a number from 1 to 65535", text, portText));
    }
    for (char c : host) {
        if (!sshNameChar(c) || host.front() == '-') {
            throw UsageError(fmt::format("lane '{}': attach:// host '{}' is not a host name or address", text, host));
        }
    }
    return target;
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
        throw UsageError(
            fmt::format("'{}': a host or user may not start with '-' (ssh would read it as an option)", text));
    }
    for (char c : t.host + t.user) {
        if (!sshNameChar(c)) {
            throw UsageError(
                fmt::format("'{}': '{}' is not allowed in an ssh host or user name", text,
                            c < 0x20 || c == 0x7f ? std::string("a control character") : std::string(1, c)));
        }
    }
    return t;
}

LaneKind laneKind(const LaneSpec& spec) {
    if (spec.launcher == "slurm") {
        return LaneKind::Slurm;
    }
    if (spec.launcher == "attach") {
        return LaneKind::Attached;
    }
    const bool script = spec.framework == "script";
    if (!script && (!spec.members.empty() || spec.workers)) {
        return LaneKind::Parallel;
    }
    if (!spec.host.empty()) {
        return LaneKind::Remote; // a script lane there too: its supervisor runs on that host
    }
    if (spec.cmd || spec.framework.value_or("devicerace") != "devicerace") {
        return LaneKind::External;
    }
    return spec.isolate.value_or(LaneKind::Thread);
}

namespace {
// The lane syntax's key=value parts from `first` on, each through its key's parser.
template <typename Parts>
void applyKeyParts(LaneSpec& spec, const Parts& parts, std::size_t first, const std::string& text) {
    for (std::size_t i = first; i < parts.size(); ++i) {
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
        detail::applyLaneKey(spec, key, value, text);
    }
}
} // namespace

LaneSpec parseLaneSpec(const std::string& text) {
    auto parts = splitString(text, ',');
    if (parts.empty() || trim(parts[0]).empty()) {
        throw UsageError(
            fmt::format("lane '{}': expected DEVICE[,key=value]... with DEVICE cpu, cuda or cuda:N", text));
    }
    LaneSpec spec;
    std::string devices(trim(parts[0]));
    // slurm://[login]/DEVICE and attach://host:port/DEVICE: ranks that a cluster's launcher starts.
    for (const std::string scheme : {"slurm://", "attach://"}) {
        if (!devices.starts_with(scheme)) {
            continue;
        }
        const auto slash = devices.find('/', scheme.size());
        if (slash == std::string::npos || slash + 1 == devices.size()) {
            throw UsageError(
                fmt::format("lane '{}': expected {}, e.g. {}", text,
                            scheme == "slurm://" ? "slurm://[login-host]/DEVICE" : "attach://host:port/DEVICE",
                            scheme == "slurm://" ? "slurm:///cpu,workers=2 or slurm://login1/cuda:0-7,nodes=8"
                                                 : "attach://127.0.0.1:29400/cpu"));
        }
        spec.launcher = scheme.substr(0, scheme.size() - 3);
        const auto target = devices.substr(scheme.size(), slash - scheme.size());
        if (spec.launcher == "slurm") {
            spec.launcherTarget = target.empty() ? std::string() : parseSshTarget("ssh://" + target).url();
        } else {
            spec.launcherTarget = parseAttachAddress(target, text);
        }
        devices = devices.substr(slash + 1);
        if (devices.find('+') != std::string::npos || devices.find("://") != std::string::npos) {
            throw UsageError(fmt::format("lane '{}': a {} lane names one kind of device (cpu, cuda or cuda:A-B for the "
                                         "GPUs of each node)",
                                         text, spec.launcher));
        }
    }
    // DEVICE, or data-parallel ranks: DEVICE+DEVICE+..., cuda:A-B, cuda:all (each may be on an ssh:// host).
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
                const auto a = detail::parseInteger("cuda", index.substr(0, dash), text);
                const auto b = detail::parseInteger("cuda", index.substr(dash + 1), text);
                if (a < 0 || b < a || b - a >= 1024) {
                    throw UsageError(fmt::format("lane '{}': cuda:{} is not a range A-B with A <= B", text, index));
                }
            } else {
                detail::parseInteger("cuda", index, text);
            }
        }
        spec.members.push_back(std::move(member));
    }
    spec.device = spec.members.front().device;
    spec.host = spec.members.front().host;
    // A launched lane's cuda:A-B names the GPUs of each node: its ranks are the launcher's.
    const bool grouped =
        spec.launcher.empty() && (spec.members.size() > 1 || spec.device == "cuda:all" ||
                                  (spec.device.starts_with("cuda:") && spec.device.find('-') != std::string::npos));
    if (!grouped) {
        spec.members.clear();
    }
    if (!spec.launcher.empty() && spec.device == "cuda:all") {
        throw UsageError(fmt::format("lane '{}': a {} lane's nodes count their own GPUs: name them per node, e.g. "
                                     "cuda:0-7",
                                     text, spec.launcher));
    }
    applyKeyParts(spec, parts, 1, text);
    detail::checkLaneSpec(spec, text);
    return spec;
}

void setLaneKeys(LaneSpec& spec, const std::string& keys) {
    if (trim(keys).empty()) {
        return;
    }
    const std::string text = formatLaneSpec(spec) + "," + keys; // the lane as messages name it
    LaneSpec changed = spec;
    applyKeyParts(changed, splitString(keys, ','), 0, text);
    detail::checkLaneSpec(changed, text);
    spec = std::move(changed);
}

void detail::checkLaneSpec(const LaneSpec& spec, const std::string& text) {
    if (spec.cmd && spec.framework.value_or("devicerace") != "devicerace") {
        throw UsageError(fmt::format("lane '{}': cmd= and framework= both name the program; give one", text));
    }
    const bool launched = !spec.launcher.empty();
    const bool parallel = !spec.members.empty() || spec.workers || launched;
    if (parallel && (spec.cmd || spec.framework.value_or("devicerace") != "devicerace")) {
        throw UsageError(
            fmt::format("lane '{}': data-parallel lanes run DeviceRace's engine (not framework= or cmd=)", text));
    }
    if (parallel && spec.isolate == LaneKind::Thread) {
        throw UsageError(fmt::format("lane '{}': a data-parallel lane's ranks are processes (isolate=thread does not "
                                     "apply)",
                                     text));
    }
    if (launched && (spec.isolate || spec.master)) {
        throw UsageError(fmt::format("lane '{}': {} lanes' ranks are started by the launcher (isolate and master do "
                                     "not apply)",
                                     text, spec.launcher));
    }
    if (spec.launcher != "slurm" &&
        (spec.nodes || spec.partition || spec.timeLimit || spec.queueLimit || spec.storePort)) {
        throw UsageError(
            fmt::format("lane '{}': nodes, partition, time, queue and port apply to slurm:// lanes", text));
    }
    if (spec.launcher != "attach" && spec.tokenFile) {
        throw UsageError(fmt::format("lane '{}': token_file applies to attach:// lanes", text));
    }
    if (spec.launcher == "attach" && spec.workers) {
        throw UsageError(fmt::format("lane '{}': an attached job has the ranks its launcher started (workers= does not "
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
}

void detail::clearGroupKeys(LaneSpec& s) {
    s.members.clear();
    s.workers.reset();
    s.backend.reset();
    s.fixedGlobalBatch.reset();
    s.master.reset();
    s.launcher.clear();
    s.launcherTarget.clear();
    s.nodes.reset();
    s.partition.reset();
    s.timeLimit.reset();
    s.queueLimit.reset();
    s.storePort.reset();
    s.tokenFile.reset();
}

std::string formatLaneSpec(const LaneSpec& s) {
    std::string out;
    if (!s.launcher.empty()) {
        const auto target = s.launcher == "slurm" && s.launcherTarget.starts_with("ssh://") ? s.launcherTarget.substr(6)
                                                                                            : s.launcherTarget;
        out = s.launcher + "://" + target + "/" + s.device;
    } else if (s.members.empty()) {
        out = s.host.empty() ? s.device : s.host + "/" + s.device;
    } else {
        for (const auto& m : s.members) {
            out += (out.empty() ? "" : "+") + (m.host.empty() ? m.device : m.host + "/" + m.device);
        }
    }
    return out + detail::formatLaneKeys(s); // the keys in the table's order (lanes/lane_keys.cpp)
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
    if (framework == "script") {
        // A user's own training command, supervised by the script lane (the command brings its
        // own framework; logdir= lanes check for tensorboard themselves).
        return FrameworkProgram{"script_lane.py", {}, {}};
    }
    for (const char* backend : {"jax", "tensorflow", "torch"}) {
        if (framework == std::string("keras-") + backend) {
            return FrameworkProgram{"keras_lane.py", {"--backend", backend}, {"keras", backend}};
        }
    }
    return std::nullopt;
}

DefaultRace defaultRace() {
    const auto& report = deviceReport();
    const int cores = std::max(1, report.cpu.physicalCores);
    DefaultRace race;
    LaneSpec one;
    one.threads = 1;
    if (report.cudaAvailable && !report.gpus.empty()) {
        LaneSpec gpu;
        gpu.device = "cuda:0";
        race.workload = "fashion-mlp";
        race.lanes = {one, gpu};
        race.note = fmt::format("the first race: fashion-mlp on one CPU thread against {}", report.gpus.front().name);
        return race;
    }
    // Without a GPU: CPU lanes one at a time, each alone (at once they would share the cores and
    // read a false ~1x). fashion-cnn: measured 1.80x from 1 to 2 threads on a 2-core Xeon where
    // fashion-mlp read 1.47x there and 0.74x on another (docs/BENCHMARKS.md, bench/first_race.py).
    race.workload = "fashion-cnn";
    race.fair = true;
    race.steps = 240; // about a minute for both lanes on two cores
    if (cores > 1) {
        LaneSpec all;
        all.threads = cores;
        race.lanes = {one, all};
        race.note = fmt::format("no CUDA device here: the first race is fashion-cnn on 1 CPU thread against {}, "
                                "each lane alone on the machine (fair mode)",
                                cores);
    } else if (!report.cpu.bf16Units.empty()) {
        LaneSpec bf16 = one;
        bf16.precision = Precision::Bf16;
        race.lanes = {one, bf16};
        race.note = fmt::format("no CUDA device and one core here: the first race is 32-bit floats against bfloat16 "
                                "on this CPU's {} units (fair mode)",
                                report.cpu.bf16Units);
    } else {
        LaneSpec small = one, large = one;
        small.batch = 32;
        large.batch = 512;
        race.lanes = {small, large};
        race.note = "no CUDA device and one core here: the first race is batch 32 against batch 512 on one thread "
                    "(fair mode)";
    }
    return race;
}

std::vector<LaneSpec> defaultLanes() { return defaultRace().lanes; }

} // namespace devicerace
