#include <gtest/gtest.h>

#include <cmath>

#include "devicerace/errors.h"
#include "devicerace/lane_spec.h"

using namespace devicerace;

TEST(LaneSpec, ParsesEveryKey) {
    auto s = parseLaneSpec("cpu,threads=2,batch=64,lr=0.01,precision=bf16,cost=0.35,name=laptop");
    EXPECT_EQ(s.device, "cpu");
    EXPECT_EQ(s.threads, 2);
    EXPECT_EQ(s.batch, 64);
    EXPECT_DOUBLE_EQ(*s.lr, 0.01);
    EXPECT_EQ(s.precision, Precision::Bf16);
    EXPECT_DOUBLE_EQ(*s.costPerHour, 0.35);
    EXPECT_EQ(s.name, "laptop");
    EXPECT_EQ(parseLaneSpec("cuda:1").device, "cuda:1");
    auto more = parseLaneSpec("cuda,channels_last=true,eval_batch=256,wd=5e-4,momentum=0.9,schedule=onecycle,"
                              "lstm=cells,data=synthetic");
    EXPECT_EQ(more.channelsLast, true);
    EXPECT_EQ(more.evalBatch, 256);
    EXPECT_DOUBLE_EQ(*more.weightDecay, 5e-4);
    EXPECT_DOUBLE_EQ(*more.momentum, 0.9);
    EXPECT_EQ(more.schedule, "onecycle");
    EXPECT_EQ(more.lstm, "cells");
    EXPECT_EQ(more.data, DataMode::Synthetic);
    EXPECT_EQ(parseLaneSpec(" cuda ").device, "cuda");
}

class BadLaneSpec : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(BadLaneSpec, IsAUsageErrorNamingTheProblem) {
    auto [text, expected] = GetParam();
    try {
        parseLaneSpec(text);
        FAIL() << text << " was accepted";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadLaneSpec,
    ::testing::Values(std::pair{"", "expected DEVICE"}, std::pair{"tpu", "unknown device 'tpu'"},
                      std::pair{"cuda:x", "not an integer"}, std::pair{"cpu,threads=0", "out of range"},
                      std::pair{"cpu,threads=-3", "out of range"}, std::pair{"cpu,batch=0", "at least 1"},
                      std::pair{"cpu,batch=-1", "at least 1"}, std::pair{"cpu,batch=1e9", "not an integer"},
                      std::pair{"cpu,lr=0", "above 0"}, std::pair{"cpu,lr=-1", "above 0"},
                      std::pair{"cpu,lr=nan", "finite"}, std::pair{"cpu,lr=inf", "finite"},
                      std::pair{"cpu,lr=abc", "not a number"}, std::pair{"cpu,precision=fp8", "precision=fp8"},
                      std::pair{"cpu,colour=red", "unknown key 'colour'"}, std::pair{"cpu,threads", "not key=value"},
                      std::pair{"cpu,cost=-2", "USD per hour"}, std::pair{"cpu,channels_last=maybe", "true or false"},
                      std::pair{"cpu,eval_batch=0", "eval_batch=0"}, std::pair{"cpu,wd=-1", "wd=-1"},
                      std::pair{"cpu,momentum=1.5", "momentum=1.5"},
                      std::pair{"cpu,schedule=linear", "schedule=linear"}, std::pair{"cpu,lstm=gru", "lstm=gru"},
                      std::pair{"cpu,data=imagenet", "data=imagenet"}));

TEST(LaneSpec, DataParallelLanesListTheirRanks) {
    // workers=N: N ranks of the one device.
    auto cpu = parseLaneSpec("cpu,workers=3,threads=1");
    EXPECT_EQ(laneKind(cpu), LaneKind::Parallel);
    ASSERT_EQ(laneRanks(cpu).size(), 3u);
    EXPECT_EQ(laneRanks(cpu)[2].device, "cpu");
    // A range, expanded in rank order, multiplied by workers.
    auto gpus = parseLaneSpec("cuda:2-4,workers=2");
    const auto ranks = laneRanks(gpus);
    ASSERT_EQ(ranks.size(), 6u);
    EXPECT_EQ(ranks[0].device, "cuda:2");
    EXPECT_EQ(ranks[1].device, "cuda:2");
    EXPECT_EQ(ranks[5].device, "cuda:4");
    // Devices on hosts, joined with '+'; rank 0 is the first listed.
    auto hosts = parseLaneSpec("ssh://a/cuda:0-1+ssh://me@b:2222/cuda:0,backend=nccl,master=10.0.0.5");
    const auto hr = laneRanks(hosts);
    ASSERT_EQ(hr.size(), 3u);
    EXPECT_EQ(hr[0].host, "ssh://a");
    EXPECT_EQ(hr[2].host, "ssh://me@b:2222");
    EXPECT_EQ(hosts.host, "ssh://a");
    EXPECT_EQ(hosts.backend, "nccl");
    EXPECT_EQ(hosts.master, "10.0.0.5");
    EXPECT_EQ(laneKind(hosts), LaneKind::Parallel);
    // cuda:all is expanded by the lane on this machine.
    EXPECT_EQ(laneKind(parseLaneSpec("cuda:all")), LaneKind::Parallel);
    // One device without workers= is an ordinary lane.
    EXPECT_TRUE(laneRanks(parseLaneSpec("cuda:1")).empty());
    EXPECT_EQ(laneKind(parseLaneSpec("ssh://a/cuda:1")), LaneKind::Remote);
    EXPECT_EQ(parseLaneSpec("cpu,workers=2,global_batch=fixed").fixedGlobalBatch, true);
}

TEST(LaneSpec, DataParallelKeysAreChecked) {
    for (const auto* bad :
         {"cpu,workers=0", "cpu,workers=2,backend=mpi", "cpu,backend=gloo", "cpu,global_batch=fixed", "cuda:3-1",
          "cuda:a-b", "ssh://a/cuda:all", "cpu+cuda:0+nonsense", "cpu,workers=2,isolate=thread",
          "cpu,workers=2,framework=pytorch", "cpu,workers=2,master=a;b", "cpu,workers=2,backend=nccl"}) {
        EXPECT_THROW(parseLaneSpec(bad), UsageError) << bad;
    }
    EXPECT_NO_THROW(parseLaneSpec("cpu,workers=2,fault=hang:0@1"));
    EXPECT_THROW(parseLaneSpec("cpu,workers=2,fault=hang@x"), UsageError);
}

TEST(LaneSpec, KeysAppliedToADeviceAreCheckedWithIt) {
    // The window's "more options" text goes through setLaneKeys onto the row's own device.
    auto ranks = parseLaneSpec("cpu+cpu");
    setLaneKeys(ranks, "backend=gloo, fused=false");
    EXPECT_EQ(ranks.backend, "gloo");
    EXPECT_EQ(ranks.fused, false);
    EXPECT_EQ(formatLaneSpec(ranks), formatLaneSpec(parseLaneSpec("cpu+cpu,backend=gloo,fused=false")));

    auto cpu = parseLaneSpec("cpu,threads=2");
    const auto before = formatLaneSpec(cpu);
    try {
        setLaneKeys(cpu, "batch=64,backend=gloo");
        FAIL() << "backend on a one-device lane was taken";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("apply to data-parallel lanes"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("cpu,threads=2"), std::string::npos) << e.what();
    }
    EXPECT_EQ(formatLaneSpec(cpu), before);                   // unchanged: not even batch=64
    EXPECT_THROW(setLaneKeys(cpu, "batch"), UsageError);      // not key=value
    EXPECT_THROW(setLaneKeys(cpu, "batch="), UsageError);     // no value
    EXPECT_THROW(setLaneKeys(cpu, "colour=red"), UsageError); // no such key
    setLaneKeys(cpu, "  ");
    EXPECT_EQ(formatLaneSpec(cpu), before);
}
