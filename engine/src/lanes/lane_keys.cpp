#include "devicerace/lane_keys.h"

#include <fmt/format.h>

#include "devicerace/errors.h"
#include "devicerace/lane_spec.h"
#include "lanes/lane_fields.h"
#include "lanes/lane_key_table.h"

namespace devicerace {

namespace {

using nlohmann::json;

std::string typeName(LaneKeyType t) {
    switch (t) {
    case LaneKeyType::Integer: return "integer";
    case LaneKeyType::Number: return "number";
    case LaneKeyType::Bool: return "true|false";
    case LaneKeyType::Choice: return "choice";
    case LaneKeyType::Text: return "text";
    case LaneKeyType::Fault: return "KIND[:STEP][@RANK]";
    }
    return "?";
}

// A JSON field back to the key's text, for its parser (which checks the value); the JSON type
// must be the key's: an integer key takes an integer, never "2".
std::string fieldText(const LaneKeyInfo& key, const json& v) {
    const auto wrong = [&] {
        return UsageError(fmt::format("lane field {}: {} is not {}", key.name, v.dump(),
                                      key.type == LaneKeyType::Integer  ? "an integer"
                                      : key.type == LaneKeyType::Number ? "a number"
                                      : key.type == LaneKeyType::Bool   ? "true or false"
                                      : key.type == LaneKeyType::Fault  ? "{\"kind\", \"step\", \"rank\"}"
                                                                        : "a string"));
    };
    const auto integer = [&](const json& n) -> std::string {
        if (n.is_number_integer()) {
            return fmt::format("{}", n.get<std::int64_t>());
        }
        if (n.is_number_unsigned()) {
            return fmt::format("{}", n.get<std::uint64_t>());
        }
        throw wrong();
    };
    switch (key.type) {
    case LaneKeyType::Integer: return integer(v);
    case LaneKeyType::Number:
        if (v.is_number_float()) {
            return fmt::format("{}", v.get<double>());
        }
        return integer(v);
    case LaneKeyType::Bool:
        if (!v.is_boolean()) {
            throw wrong();
        }
        return v.get<bool>() ? "true" : "false";
    case LaneKeyType::Fault: {
        if (!v.is_object() || !v.contains("kind") || !v.at("kind").is_string()) {
            throw wrong();
        }
        std::string out = v.at("kind").get<std::string>();
        for (const auto& [field, value] : v.items()) {
            if (field != "kind" && field != "step" && field != "rank") {
                throw wrong();
            }
        }
        if (v.contains("step")) {
            out += ":" + integer(v.at("step"));
        }
        if (v.contains("rank")) {
            out += "@" + integer(v.at("rank"));
        }
        return out;
    }
    case LaneKeyType::Choice:
    case LaneKeyType::Text:
        if (!v.is_string()) {
            throw wrong();
        }
        return v.get<std::string>();
    }
    throw wrong();
}

} // namespace

std::string LaneFault::text() const {
    std::string out = kind;
    if (step) {
        out += fmt::format(":{}", *step);
    }
    if (rank) {
        out += fmt::format("@{}", *rank);
    }
    return out;
}

const std::vector<LaneKeyInfo>& laneKeys() {
    static const std::vector<LaneKeyInfo> keys = [] {
        std::vector<LaneKeyInfo> out;
        for (const auto& c : detail::keyCodecs()) {
            out.push_back(c.info);
        }
        return out;
    }();
    return keys;
}

const LaneKeyInfo* findLaneKey(const std::string& name) {
    const auto* c = detail::findKeyCodec(name);
    return c ? &c->info : nullptr;
}

std::string laneKeyNames() {
    std::vector<std::string> names;
    for (const auto& k : laneKeys()) {
        names.push_back(k.name);
    }
    return detail::orList(names);
}

std::string laneKeysHelp() {
    std::string out;
    for (const auto& k : laneKeys()) {
        std::string type = k.type == LaneKeyType::Choice ? detail::orList(k.choices) : typeName(k.type);
        out += fmt::format("  {:<14}{} ({}; default: {}; {})\n", k.name, k.help, type, k.defaultText, k.appliesTo);
    }
    return out;
}

std::string laneKeyValue(const LaneSpec& spec, const std::string& key) {
    const auto* codec = detail::findKeyCodec(key);
    if (!codec) {
        throw UsageError(fmt::format("unknown lane key '{}' (expected {})", key, laneKeyNames()));
    }
    return codec->format(spec).value_or("");
}

void setLaneKey(LaneSpec& spec, const std::string& key, const std::string& value) {
    if (!detail::findKeyCodec(key)) {
        throw UsageError(fmt::format("unknown lane key '{}' (expected {})", key, laneKeyNames()));
    }
    if (value.empty()) {
        // Cleared: every other key applied again onto a spec with the same device.
        LaneSpec out;
        out.device = spec.device;
        out.host = spec.host;
        out.members = spec.members;
        const std::string text = formatLaneSpec(spec);
        for (const auto& c : detail::keyCodecs()) {
            if (c.info.name != key) {
                if (auto v = c.format(spec)) {
                    c.parse(out, *v, text);
                }
            }
        }
        spec = std::move(out);
        return;
    }
    detail::applyLaneKey(spec, key, value, formatLaneSpec(spec));
}

namespace detail {

void applyLaneKey(LaneSpec& spec, std::string_view key, std::string_view value, const std::string& text) {
    const auto* codec = detail::findKeyCodec(key);
    if (!codec) {
        throw UsageError(fmt::format("lane '{}': unknown key '{}' (expected {})", text, key, laneKeyNames()));
    }
    codec->parse(spec, value, text);
}

std::string formatLaneKeys(const LaneSpec& spec) {
    std::string out;
    for (const auto& c : detail::keyCodecs()) {
        if (auto v = c.format(spec)) {
            out += "," + c.info.name + "=" + *v;
        }
    }
    return out;
}

json laneToFields(const LaneSpec& spec) {
    const std::string text = formatLaneSpec(spec);
    json out = json::object();
    out["device"] = text.substr(0, text.find(','));
    for (const auto& c : detail::keyCodecs()) {
        const auto v = c.format(spec);
        if (!v) {
            continue;
        }
        switch (c.info.type) {
        case LaneKeyType::Integer: out[c.info.name] = std::stoll(*v); break;
        // fmt writes the shortest text that reads back exactly.
        case LaneKeyType::Number: out[c.info.name] = std::stod(*v); break;
        case LaneKeyType::Bool: out[c.info.name] = *v == "true"; break;
        case LaneKeyType::Fault: {
            json f = {{"kind", spec.fault->kind}};
            if (spec.fault->step) {
                f["step"] = *spec.fault->step;
            }
            if (spec.fault->rank) {
                f["rank"] = *spec.fault->rank;
            }
            out[c.info.name] = f;
            break;
        }
        default: out[c.info.name] = *v;
        }
    }
    return out;
}

LaneSpec laneFromFields(const json& fields) {
    if (!fields.is_object() || !fields.contains("device") || !fields.at("device").is_string()) {
        throw UsageError("lane fields: expected an object with a \"device\" string");
    }
    // The device part goes through the lane parser (ranks, ssh:// hosts, cuda:A-B); each key
    // through its own parser, as typed on a command line.
    LaneSpec spec = parseLaneSpec(fields.at("device").get<std::string>());
    const std::string text = formatLaneSpec(spec);
    for (const auto& [key, value] : fields.items()) {
        if (key == "device") {
            continue;
        }
        const auto* codec = detail::findKeyCodec(key);
        if (!codec) {
            throw UsageError(fmt::format("lane field '{}': no such lane key (expected {})", key, laneKeyNames()));
        }
        codec->parse(spec, fieldText(codec->info, value), text);
    }
    checkLaneSpec(spec, text);
    return spec;
}

} // namespace detail

} // namespace devicerace
