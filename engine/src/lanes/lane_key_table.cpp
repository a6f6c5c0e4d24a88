// The lane-key table: every key's description with its parser and writer (lane_key_table.h).
#include "lanes/lane_key_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>

#include "devicerace/errors.h"

namespace devicerace::detail {

std::string orList(const std::vector<std::string>& words) {
    std::string out;
    for (std::size_t i = 0; i < words.size(); ++i) {
        out += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
    }
    return out;
}

std::int64_t parseInteger(std::string_view key, std::string_view value, const std::string& spec) {
    std::int64_t out = 0;
    const auto* end = value.data() + value.size();
    auto [ptr, ec] = std::from_chars(value.data(), end, out);
    if (ec != std::errc() || ptr != end) {
        throw UsageError(fmt::format("lane '{}': {}={} is not an integer", spec, key, value));
    }
    return out;
}

namespace {

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
    if (value == "true" || value == "1" || value == "yes" || value == "on") {
        return true;
    }
    if (value == "false" || value == "0" || value == "no" || value == "off") {
        return false;
    }
    throw UsageError(fmt::format("lane '{}': {}={} (expected true or false)", spec, key, value));
}

void refuseControlCharacters(std::string_view key, std::string_view value, const std::string& spec) {
    for (char c : value) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
            throw UsageError(fmt::format("lane '{}': {}= holds a control character", spec, key));
        }
    }
}

// fault=KIND[:STEP][@RANK] (STEP 0: before training starts, i.e. before a data-parallel rank
// joins its group).
std::optional<LaneFault> parseFaultText(std::string_view v) {
    LaneFault f;
    const auto number = [](std::string_view s) -> std::optional<std::int64_t> {
        std::int64_t n = 0;
        auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
        if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || n < 0) {
            return std::nullopt;
        }
        return n;
    };
    if (const auto at = v.find('@'); at != std::string_view::npos) {
        const auto rank = number(v.substr(at + 1));
        if (!rank || *rank > 4096) {
            return std::nullopt;
        }
        f.rank = static_cast<int>(*rank);
        v = v.substr(0, at);
    }
    const auto colon = v.find(':');
    f.kind = std::string(v.substr(0, colon));
    if (f.kind != "throw" && f.kind != "abort" && f.kind != "segv" && f.kind != "exit" && f.kind != "hang" &&
        f.kind != "slow-data") {
        return std::nullopt;
    }
    if (colon != std::string_view::npos) {
        f.step = number(v.substr(colon + 1));
        if (!f.step) {
            return std::nullopt;
        }
    }
    return f;
}

template <typename T>
std::function<std::optional<std::string>(const LaneSpec&)> formatOptional(std::optional<T> LaneSpec::*member) {
    return [member](const LaneSpec& s) -> std::optional<std::string> {
        const auto& v = s.*member;
        if (!v) {
            return std::nullopt;
        }
        if constexpr (std::is_same_v<T, bool>) {
            return std::string(*v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
            return *v;
        } else {
            return fmt::format("{}", *v);
        }
    };
}

constexpr std::int64_t kNoMax = std::numeric_limits<std::int64_t>::max();

// An integer key in [min, max] (`rangeText` says the range in the refusal).
template <typename T>
KeyCodec integerKey(LaneKeyInfo info, std::optional<T> LaneSpec::*member, std::int64_t min, std::int64_t max,
                    std::string rangeText) {
    info.type = LaneKeyType::Integer;
    auto name = info.name;
    return {std::move(info),
            [=](LaneSpec& s, std::string_view value, const std::string& text) {
                const auto v = parseInteger(name, value, text);
                if (v < min || v > max) {
                    throw UsageError(fmt::format("lane '{}': {}={} {}", text, name, v, rangeText));
                }
                s.*member = static_cast<T>(v);
            },
            formatOptional(member)};
}

KeyCodec numberKey(LaneKeyInfo info, std::optional<double> LaneSpec::*member, std::function<bool(double)> ok,
                   std::string rangeText) {
    info.type = LaneKeyType::Number;
    auto name = info.name;
    return {std::move(info),
            [=](LaneSpec& s, std::string_view value, const std::string& text) {
                const double v = parseNumber(name, value, text);
                if (!std::isfinite(v) || !ok(v)) {
                    throw UsageError(fmt::format("lane '{}': {}={} must be {}", text, name, value, rangeText));
                }
                s.*member = v;
            },
            formatOptional(member)};
}

KeyCodec boolKey(LaneKeyInfo info, std::optional<bool> LaneSpec::*member) {
    info.type = LaneKeyType::Bool;
    info.choices = {"true", "false"};
    auto name = info.name;
    return {
        std::move(info),
        [=](LaneSpec& s, std::string_view value, const std::string& text) { s.*member = parseBool(name, value, text); },
        formatOptional(member)};
}

KeyCodec choiceKey(LaneKeyInfo info, std::optional<std::string> LaneSpec::*member, std::vector<std::string> choices) {
    info.type = LaneKeyType::Choice;
    info.choices = choices;
    auto name = info.name;
    return {std::move(info),
            [=](LaneSpec& s, std::string_view value, const std::string& text) {
                if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
                    throw UsageError(fmt::format("lane '{}': {}={} (expected {})", text, name, value, orList(choices)));
                }
                s.*member = std::string(value);
            },
            formatOptional(member)};
}

// A choice between two words held as a typed value (DataMode, LaneKind): `first` and `second`
// name the values; `shown` says whether a set value is written back (a key that does not apply
// to the lane is left out).
template <typename T>
KeyCodec twoWordKey(LaneKeyInfo info, std::optional<T> LaneSpec::*member, std::pair<const char*, T> first,
                    std::pair<const char*, T> second, bool (*shown)(const LaneSpec&) = nullptr) {
    info.type = LaneKeyType::Choice;
    info.choices = {first.first, second.first};
    auto name = info.name;
    return {std::move(info),
            [=](LaneSpec& s, std::string_view value, const std::string& text) {
                if (value != first.first && value != second.first) {
                    throw UsageError(fmt::format("lane '{}': {}={} (expected {} or {})", text, name, value, first.first,
                                                 second.first));
                }
                s.*member = value == first.first ? first.second : second.second;
            },
            [=](const LaneSpec& s) -> std::optional<std::string> {
                if (!(s.*member) || (shown && !shown(s))) {
                    return std::nullopt;
                }
                return std::string(*(s.*member) == first.second ? first.first : second.first);
            }};
}

KeyCodec textKey(LaneKeyInfo info, std::optional<std::string> LaneSpec::*member,
                 std::function<void(std::string_view value, const std::string& text)> check) {
    info.type = LaneKeyType::Text;
    return {std::move(info),
            [=](LaneSpec& s, std::string_view value, const std::string& text) {
                check(value, text);
                s.*member = std::string(value);
            },
            formatOptional(member)};
}

} // namespace

const std::vector<KeyCodec>& keyCodecs() {
    static const std::vector<KeyCodec> table = [] {
        std::vector<KeyCodec> t;
        const auto info = [](std::string name, std::string def, std::string applies, std::string help,
                             bool column = false) {
            LaneKeyInfo i;
            i.name = std::move(name);
            i.defaultText = std::move(def);
            i.appliesTo = std::move(applies);
            i.help = std::move(help);
            i.windowColumn = column;
            return i;
        };
        t.push_back(integerKey(info("threads", "all cores; in a live race the cores left, shared", "CPU lanes",
                                    "CPU intra-op threads (per rank of a data-parallel lane)", true),
                               &LaneSpec::threads, 1, 1024, "is out of range (1 to the cores present)"));
        t.push_back(integerKey(info("batch", "the workload's", "every lane",
                                    "examples per step (per rank; global_batch=fixed: the lane's)", true),
                               &LaneSpec::batch, 1, kNoMax, "must be at least 1"));
        t.push_back(numberKey(
            info("lr", "the workload's", "every lane", "learning rate", true), &LaneSpec::lr,
            [](double v) { return v > 0; }, "a finite number above 0"));
        {
            LaneKeyInfo i = info("precision", "fp32", "every lane (fp16: CUDA)", "training precision", true);
            i.type = LaneKeyType::Choice;
            i.choices = {"fp32", "bf16", "fp16"};
            t.push_back({std::move(i),
                         [](LaneSpec& s, std::string_view value, const std::string& text) {
                             if (value == "fp32") {
                                 s.precision = Precision::Fp32;
                             } else if (value == "bf16") {
                                 s.precision = Precision::Bf16;
                             } else if (value == "fp16") {
                                 s.precision = Precision::Fp16;
                             } else {
                                 throw UsageError(
                                     fmt::format("lane '{}': precision={} (expected fp32, bf16 or fp16)", text, value));
                             }
                         },
                         [](const LaneSpec& s) -> std::optional<std::string> {
                             if (s.precision == Precision::Fp32) {
                                 return std::nullopt;
                             }
                             return toString(s.precision);
                         }});
        }
        t.push_back(numberKey(
            info("cost", "none", "every lane", "USD per hour of the device (cost to target)", true),
            &LaneSpec::costPerHour, [](double v) { return v >= 0; }, "USD per hour, 0 or more"));
        t.push_back(boolKey(info("channels_last", "per workload on CPUs (measured)", "image workloads",
                                 "4-D activations and weights in NHWC"),
                            &LaneSpec::channelsLast));
        t.push_back(integerKey(
            info("eval_batch", "~3 MB of input, at least batch", "every lane", "examples per evaluation pass"),
            &LaneSpec::evalBatch, 1, kNoMax, "must be at least 1"));
        t.push_back(numberKey(
            info("wd", "the workload's", "every lane", "weight decay"), &LaneSpec::weightDecay,
            [](double v) { return v >= 0; }, "a finite number, 0 or more"));
        t.push_back(numberKey(
            info("momentum", "the workload's", "every lane", "SGD momentum"), &LaneSpec::momentum,
            [](double v) { return v >= 0 && v < 1; }, "in [0, 1)"));
        t.push_back(choiceKey(info("schedule", "the workload's", "every lane", "learning-rate schedule"),
                              &LaneSpec::schedule, {"constant", "step", "onecycle", "cosine"}));
        t.push_back(choiceKey(info("lstm", "fused", "LSTM workloads", "fused (cuDNN/oneDNN) or per-step LSTM cells"),
                              &LaneSpec::lstm, {"fused", "cells"}));
        t.push_back(twoWordKey(info("data", "the race's", "every lane", "this lane's data: real or synthetic"),
                               &LaneSpec::data, {"real", DataMode::Real}, {"synthetic", DataMode::Synthetic}));
        t.push_back(choiceKey(info("augment", "none", "image workloads",
                                   "per-example augmentation of the training batches: crop-flip (a random crop "
                                   "of the image padded by 4 pixels, flipped left-right half the time)"),
                              &LaneSpec::augment, {"none", "crop-flip"}));
        t.push_back(boolKey(info("fused", "true", "every lane",
                                 "fused optimizer kernels; on CPUs also one-pass layers (dense step, relu + pool, "
                                 "batch norm + relu, LSTM gates) and timed conv weight gradients"),
                            &LaneSpec::fused));
        t.push_back(boolKey(info("graph", "true where it helps", "CUDA lanes", "the training step in a CUDA graph"),
                            &LaneSpec::graph));
        t.push_back(boolKey(info("resident", "true unless the data is large", "CUDA lanes",
                                 "the data set on the GPU (false: pinned host copies, prefetched)"),
                            &LaneSpec::resident));
        // Remote lanes are processes over there: the key does not apply to them.
        t.push_back(twoWordKey(info("isolate", "thread (process for 2+ local CUDA lanes)", "local lanes",
                                    "run the lane in this process or in a worker process of its own"),
                               &LaneSpec::isolate, {"thread", LaneKind::Thread}, {"process", LaneKind::Process},
                               [](const LaneSpec& s) { return s.host.empty(); }));
        t.push_back(textKey(info("cli", "devicerace-cli on PATH (remote), this one (local)", "worker lanes",
                                 "the devicerace-cli that runs the worker"),
                            &LaneSpec::cli, [](std::string_view v, const std::string& text) {
                                refuseControlCharacters("cli", v, text);
                            }));
        {
            LaneKeyInfo i = info("fault", "none", "tests",
                                 "inject throw|abort|segv|exit|hang[:STEP][@RANK] (STEP 0: before training), or "
                                 "slow-data[:STEP] (20 ms more input work in every step from STEP)");
            i.type = LaneKeyType::Fault;
            i.choices = {"throw", "abort", "segv", "exit", "hang", "slow-data"};
            t.push_back({std::move(i),
                         [](LaneSpec& s, std::string_view value, const std::string& text) {
                             auto f = parseFaultText(value);
                             if (!f) {
                                 throw UsageError(
                                     fmt::format("lane '{}': fault={} (expected throw, abort, segv, exit, "
                                                 "hang or slow-data, optionally :STEP and, in a data-parallel "
                                                 "lane, @RANK)",
                                                 text, value));
                             }
                             s.fault = std::move(f);
                         },
                         [](const LaneSpec& s) -> std::optional<std::string> {
                             if (!s.fault) {
                                 return std::nullopt;
                             }
                             return s.fault->text();
                         }});
        }
        t.push_back(textKey(info("framework", "devicerace", "local and remote lanes",
                                 "the trainer that runs the lane (a shipped lane program, or DeviceRace)"),
                            &LaneSpec::framework, [](std::string_view v, const std::string& text) {
                                if (v != "devicerace" && !frameworkProgram(v)) {
                                    throw UsageError(fmt::format("lane '{}': framework={} (expected devicerace, "
                                                                 "pytorch, keras-jax, keras-tensorflow, keras-torch "
                                                                 "or script)",
                                                                 text, v));
                                }
                            }));
        t.back().info.type = LaneKeyType::Choice;
        t.back().info.choices = {"devicerace", "pytorch", "keras-jax", "keras-tensorflow", "keras-torch", "script"};
        // Script lanes: a user's own training command (README, "Race your own training").
        t.push_back(boolKey(info("instrument", "true", "script lanes",
                                 "count PyTorch's optimizer steps and backward() losses in the script's Python"),
                            &LaneSpec::instrument));
        t.push_back(boolKey(info("printed", "true", "script lanes",
                                 "read test and validation accuracy and loss from the lines the script prints "
                                 "(test accuracy 0.83, val_loss: 0.41, 'eval_accuracy': 0.85)"),
                            &LaneSpec::printed));
        t.push_back(textKey(info("logdir", "none", "script lanes",
                                 "read the TensorBoard scalars the script writes in this folder (relative: to "
                                 "workdir); the script finds it in $DEVICERACE_LOGDIR"),
                            &LaneSpec::logdir, [](std::string_view v, const std::string& text) {
                                refuseControlCharacters("logdir", v, text);
                            }));
        t.push_back(textKey(info("loss_tag", "loss", "script lanes with logdir",
                                 "the training loss's scalar tag (a regular expression)"),
                            &LaneSpec::lossTag, [](std::string_view v, const std::string& text) {
                                refuseControlCharacters("loss_tag", v, text);
                            }));
        t.push_back(textKey(info("acc_tag", "acc", "script lanes with logdir",
                                 "the evaluation accuracy's scalar tag (a regular expression)"),
                            &LaneSpec::accTag, [](std::string_view v, const std::string& text) {
                                refuseControlCharacters("acc_tag", v, text);
                            }));
        t.push_back(numberKey(
            info("quiet", "120", "script lanes", "seconds without a training step before the lane fails"),
            &LaneSpec::quiet, [](double v) { return v >= 1 && v <= 86400; }, "from 1 to 86,400 seconds"));
        t.push_back(textKey(info("workdir", "the current folder (ssh://: the login folder)", "script lanes",
                                 "the folder the command runs in"),
                            &LaneSpec::workdir, [](std::string_view v, const std::string& text) {
                                refuseControlCharacters("workdir", v, text);
                            }));
        t.push_back(textKey(info("copy", "none", "ssh:// script lanes",
                                 "a local folder copied (rsync over the lane's ssh) to workdir before the race"),
                            &LaneSpec::copy, [](std::string_view v, const std::string& text) {
                                refuseControlCharacters("copy", v, text);
                            }));
        t.push_back(textKey(info("args", "none", "script lanes",
                                 "words added to the race's command for this lane, split as a shell would "
                                 "(args=--compile, or args=--batch 256)"),
                            &LaneSpec::args, [](std::string_view v, const std::string& text) {
                                refuseControlCharacters("args", v, text);
                            }));
        t.push_back(textKey(
            info("cmd", "none", "local lanes", "a program speaking the worker protocol (runs only with your consent)"),
            &LaneSpec::cmd,
            [](std::string_view v, const std::string& text) { refuseControlCharacters("cmd", v, text); }));
        t.push_back(integerKey(info("workers", "1", "data-parallel lanes", "ranks per listed device"),
                               &LaneSpec::workers, 1, 1024, "is out of range (1 to 1,024)"));
        t.push_back(choiceKey(info("backend", "nccl on CUDA, gloo on CPUs", "data-parallel lanes", "the c10d backend"),
                              &LaneSpec::backend, {"gloo", "nccl"}));
        {
            LaneKeyInfo i = info("global_batch", "scaled", "data-parallel lanes",
                                 "scaled: batch per worker; fixed: batch split over the workers");
            i.type = LaneKeyType::Choice;
            i.choices = {"scaled", "fixed"};
            t.push_back({std::move(i),
                         [](LaneSpec& s, std::string_view value, const std::string& text) {
                             if (value != "fixed" && value != "scaled") {
                                 throw UsageError(fmt::format("lane '{}': global_batch={} (expected scaled: batch per "
                                                              "worker, or fixed: batch split over the workers)",
                                                              text, value));
                             }
                             s.fixedGlobalBatch = value == "fixed";
                         },
                         [](const LaneSpec& s) -> std::optional<std::string> {
                             if (!s.fixedGlobalBatch) {
                                 return std::nullopt;
                             }
                             return std::string(*s.fixedGlobalBatch ? "fixed" : "scaled");
                         }});
        }
        t.push_back(textKey(
            info("master", "derived", "data-parallel lanes", "the address the ranks reach rank 0's store at"),
            &LaneSpec::master, [](std::string_view v, const std::string& text) {
                for (char c : v) {
                    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' && c != '_') {
                        throw UsageError(fmt::format("lane '{}': master={} is not a host name or address", text, v));
                    }
                }
            }));
        // Ranks that a cluster's launcher starts (slurm://, attach://; docs/PARALLEL.md).
        t.push_back(integerKey(info("nodes", "1", "slurm:// lanes", "nodes the job asks for"), &LaneSpec::nodes, 1,
                               100000, "is out of range (1 to 100,000)"));
        t.push_back(textKey(
            info("partition", "the cluster's default", "slurm:// lanes", "the Slurm partition"), &LaneSpec::partition,
            [](std::string_view v, const std::string& text) {
                for (char c : v) {
                    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
                        throw UsageError(fmt::format("lane '{}': partition={} is not a partition name", text, v));
                    }
                }
            }));
        t.push_back(integerKey(info("time", "the partition's", "slurm:// lanes", "the job's time limit in minutes"),
                               &LaneSpec::timeLimit, 1, 525600, "is out of range (1 to 525,600 minutes)"));
        t.push_back(numberKey(
            info("queue", "600", "slurm:// lanes", "seconds the job may wait in the queue before the lane fails"),
            &LaneSpec::queueLimit, [](double v) { return v >= 1 && v <= 7 * 86400; }, "from 1 to 604,800 seconds"));
        t.push_back(integerKey(
            info("port", "20000 + job id mod 20000", "slurm:// lanes", "the port rank 0's rendezvous store listens on"),
            &LaneSpec::storePort, 1024, 65535, "is out of range (1,024 to 65,535)"));
        t.push_back(textKey(info("token_file", "$DEVICERACE_ATTACH_TOKEN", "attach:// lanes",
                                 "the file holding the token the job was given"),
                            &LaneSpec::tokenFile, [](std::string_view v, const std::string& text) {
                                refuseControlCharacters("token_file", v, text);
                            }));
        {
            LaneKeyInfo i = info("name", "cpu·N, cuda:N, ...", "every lane", "the lane's name everywhere", true);
            i.type = LaneKeyType::Text;
            t.push_back({std::move(i),
                         [](LaneSpec& s, std::string_view value, const std::string& text) {
                             // The lane syntax separates keys by ',' and a name is shown on one line.
                             refuseControlCharacters("name", value, text);
                             s.name = std::string(value);
                         },
                         [](const LaneSpec& s) -> std::optional<std::string> {
                             if (s.name.empty()) {
                                 return std::nullopt;
                             }
                             return s.name;
                         }});
        }
        return t;
    }();
    return table;
}

const KeyCodec* findKeyCodec(std::string_view name) {
    for (const auto& c : keyCodecs()) {
        if (c.info.name == name) {
            return &c;
        }
    }
    return nullptr;
}

} // namespace devicerace::detail
