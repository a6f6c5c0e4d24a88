#pragma once
// The worker protocol: one compact JSON object per line, `type` names the message
// (docs/EVENTS.md). Shared by the worker (devicerace-cli worker) and the parent's
// WorkerLane. Parsing is bounded and strict; nothing in a message is ever executed.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "devicerace/lane.h"

namespace devicerace::detail {

inline constexpr int kProtoMajor = 1;
inline constexpr int kProtoMinor = 2; // 1.1: config.lane_fields; 1.2: config.workload_info, constants
// Longest line either side accepts; longer ones are dropped and counted (a sample is ~400 B,
// a hello with 8 GPUs ~3 KB, a charlstm evaluation's text ~1 KB).
inline constexpr std::size_t kMaxLineBytes = 1 << 20;

/// Cuts a byte stream into lines ('\n', a trailing '\r' removed). A line longer than the cap
/// is dropped whole, up to its newline, and counted. Not thread-safe (one reader per stream).
class LineSplitter {
public:
    explicit LineSplitter(std::size_t maxLine = kMaxLineBytes) : m_max(maxLine) {}
    void feed(std::string_view bytes, const std::function<void(std::string&&)>& onLine);
    std::size_t droppedLines() const { return m_dropped; }
    /// Bytes of an unfinished last line (shown when a stream ends mid-line).
    const std::string& partial() const { return m_partial; }

private:
    std::size_t m_max;
    std::string m_partial;
    bool m_skipping = false; // inside an over-long line
    std::size_t m_dropped = 0;
};

struct Message {
    std::string type;
    nlohmann::json body; // the whole object
};

/// One line as a protocol message; nullopt when it is not a JSON object with a string `type`
/// (a line of shell noise, a stray print, garbage).
std::optional<Message> parseMessage(std::string_view line);

/// The line for a message (compact JSON plus '\n'); invalid UTF-8 is replaced, not thrown.
std::string encodeMessage(const nlohmann::json& message);

/// "1.0" -> major 1; nullopt when not MAJOR.MINOR.
std::optional<int> protoMajor(const std::string& version);
std::string protoVersion(); // "1.0"

/// The `config` message: everything a worker needs to build the lane where it runs.
nlohmann::json configMessage(const LaneSpec& spec, const LaneRunSettings& settings);
/// Reads a `config` message back (strict: types checked, the lane re-parsed by the lane-spec
/// parser, limits as in the CLI). Throws UsageError / DataError.
std::pair<LaneSpec, LaneRunSettings> configFromMessage(const nlohmann::json& message);

/// What a worker says about the lane once it accepted it (`ready`).
struct ReadyInfo {
    std::int64_t batch = 0;
    std::int64_t totalSteps = 0;
    std::optional<int> threads;
    std::string datasetName, datasetSource, dataNote;
    bool synthetic = false;
    std::int64_t trainCount = 0, testCount = 0;
    int vocabulary = 0;                 // token data: ids 0..vocabulary-1 (0: images)
    std::vector<std::string> tokenText; // each id's text where the vocabulary is small (a text's alphabet)
    std::optional<int> storePort;       // rank 0 of a data-parallel lane: where its rendezvous store listens
    // Rank 0 of a lane whose ranks a launcher started (slurm://, attach://):
    std::optional<int> ranks; // the job's ranks
    std::string job;          // Slurm's job id, torchrun's run id
    std::string nodes;        // the job's nodes (Slurm's node list)
};
nlohmann::json readyMessage(const ReadyInfo& info);
ReadyInfo readyFromMessage(const nlohmann::json& message); // throws DataError

} // namespace devicerace::detail
