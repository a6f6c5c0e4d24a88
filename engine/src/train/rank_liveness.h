#pragma once
// Whether the other ranks' processes of a data-parallel lane still exist, for a rank that waits
// in a collective. Gloo does not always see a peer die: a rank whose send waits for the dead
// peer's receive stays in UnboundBuffer::waitSend until the collective timeout (30 minutes),
// though the peer's sockets are closed. So each rank keeps one idle TCP connection to rank 0
// (rank 0 one to each), on which nothing is ever sent after the rank's number: the kernel closes
// it when the process ends, however it ends (SIGKILL included), and that end is read here.
// A rank that hangs keeps its connection: the parent's supervision (silence) catches that one.
#include <optional>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace devicerace::detail {

class RankLiveness {
public:
    /// Rank 0 listens on an ephemeral port, publishes it in `store` and accepts the other
    /// world - 1 ranks; each other rank connects to rank0Host at that port and says its number.
    /// Throws Error when a connection cannot be made within `timeoutSeconds`.
    RankLiveness(c10d::Store& store, int rank, int world, const std::string& rank0Host, double timeoutSeconds);
    ~RankLiveness();
    RankLiveness(const RankLiveness&) = delete;
    RankLiveness& operator=(const RankLiveness&) = delete;

    /// A rank whose process is gone (its connection closed), if any: on rank 0 any other rank,
    /// on the others rank 0. Never blocks.
    std::optional<int> lostRank() const;
    /// This process's rank.
    int rank() const { return m_rank; }

private:
    struct Peer {
        int fd = -1;
        int rank = 0;
    };
    int m_rank = 0;
    std::vector<Peer> m_peers;
};

} // namespace devicerace::detail
