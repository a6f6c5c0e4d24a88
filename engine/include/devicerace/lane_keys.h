#pragma once
/// The lane keys (`cpu,threads=2,batch=64,...`): one table that parsing, formatting, the worker
/// protocol's lane fields, `--lane` help, and the window's editors and tooltips all read, so a
/// key is described, checked and written in one place. Thread-safe (read-only).
#include <string>
#include <vector>

namespace devicerace {

enum class LaneKeyType { Integer, Number, Bool, Choice, Text, Fault };

struct LaneKeyInfo {
    std::string name; // "threads"
    LaneKeyType type = LaneKeyType::Text;
    std::vector<std::string> choices; // Choice (and Bool-like words): the values it takes
    std::string defaultText;          // what an unset key means: "the workload's", "auto"
    std::string appliesTo;            // the lanes that take it: "every lane", "CUDA lanes", ...
    std::string help;                 // one line
    bool windowColumn = false;        // the window's lanes table has a column of its own for it
};

/// Every key, in the order formatLaneSpec writes them (name last).
const std::vector<LaneKeyInfo>& laneKeys();
/// nullptr for an unknown name.
const LaneKeyInfo* findLaneKey(const std::string& name);
/// "threads (integer; default: ...; every lane): ..." one line per key: the CLI's --lane help.
std::string laneKeysHelp();
/// "threads, batch, ... or name": every key, for messages.
std::string laneKeyNames();

struct LaneSpec;
/// The key's value in `spec` as the lane syntax writes it ("2", "true", "segv:3"), or "" when
/// unset. Throws UsageError for an unknown key.
std::string laneKeyValue(const LaneSpec& spec, const std::string& key);
/// Sets (or, with "", clears) the key on `spec`, checked by its parser; throws UsageError.
void setLaneKey(LaneSpec& spec, const std::string& key, const std::string& value);

} // namespace devicerace
