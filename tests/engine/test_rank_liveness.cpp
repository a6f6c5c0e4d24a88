// train/rank_liveness.h: each rank of a data-parallel lane learns when another rank's process is
// gone (its idle connection to rank 0 closed), which Gloo does not always notice; a connection
// without the store's token is not taken for a rank.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "train/rank_liveness.h"

using devicerace::detail::RankLiveness;

namespace {

c10::intrusive_ptr<c10d::TCPStore> storeServer(int world) {
    c10d::TCPStoreOptions opts;
    opts.port = 0;
    opts.isServer = true;
    opts.numWorkers = world;
    opts.waitWorkers = false;
    opts.timeout = std::chrono::seconds(30);
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
}

c10::intrusive_ptr<c10d::TCPStore> storeClient(int port) {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(port);
    opts.isServer = false;
    opts.waitWorkers = false;
    opts.timeout = std::chrono::seconds(30);
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
}

// lostRank() once it names a rank (a closed connection is seen when its FIN arrives), else none
// after 10 s.
std::optional<int> awaitLoss(const RankLiveness& l) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
        if (auto r = l.lostRank()) {
            return r;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
}

} // namespace

TEST(RankLiveness, EachRankLearnsWhichRankHasGone) {
    auto server = storeServer(3);
    const int port = server->getPort();
    auto rank0 =
        std::async(std::launch::async, [&] { return std::make_unique<RankLiveness>(*server, 0, 3, "", 30.0); });
    auto store1 = storeClient(port);
    auto store2 = storeClient(port);
    auto rank2 = std::async(std::launch::async,
                            [&] { return std::make_unique<RankLiveness>(*store2, 2, 3, "127.0.0.1", 30.0); });
    auto rank1 = std::make_unique<RankLiveness>(*store1, 1, 3, "127.0.0.1", 30.0);
    auto zero = rank0.get();
    auto two = rank2.get();
    EXPECT_EQ(zero->lostRank(), std::nullopt);
    EXPECT_EQ(rank1->lostRank(), std::nullopt);
    EXPECT_EQ(two->lostRank(), std::nullopt);

    two.reset(); // rank 2's process ends: its connection closes
    EXPECT_EQ(awaitLoss(*zero), 2);
    EXPECT_EQ(rank1->lostRank(), std::nullopt); // rank 1 watches rank 0, who is still there
    zero.reset();                               // rank 0 leaves (its lane failed): the others see it go
    EXPECT_EQ(awaitLoss(*rank1), 0);
}

TEST(RankLiveness, AConnectionWithoutTheTokenIsNotARank) {
    auto server = storeServer(2);
    auto rank0 =
        std::async(std::launch::async, [&] { return std::make_unique<RankLiveness>(*server, 0, 2, "", 30.0); });
    auto peek = storeClient(server->getPort()); // (a store's client serves one thread)
    peek->wait({"devicerace/liveness/port"});
    const auto port = std::stoi([&] {
        auto b = peek->get("devicerace/liveness/port");
        return std::string(b.begin(), b.end());
    }());
    // A stranger names rank 1 with a wrong token, then leaves: rank 0 waits on for rank 1.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string line = "0123456789abcdef0123456789abcdef 1\n";
    ASSERT_EQ(::send(fd, line.data(), line.size(), 0), static_cast<ssize_t>(line.size()));
    ::close(fd);
    EXPECT_EQ(rank0.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
    auto store1 = storeClient(server->getPort());
    RankLiveness rank1(*store1, 1, 2, "127.0.0.1", 30.0);
    auto zero = rank0.get();
    EXPECT_EQ(zero->lostRank(), std::nullopt); // the stranger's closed connection is not rank 1's
}

TEST(RankLiveness, ARankThatNeverConnectsIsNamedInTheTimeout) {
    auto server = storeServer(2);
    try {
        RankLiveness rank0(*server, 0, 2, "", 0.5);
        FAIL() << "rank 0 returned without rank 1";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("did not open their liveness connection within"), std::string::npos)
            << e.what();
    }
}
