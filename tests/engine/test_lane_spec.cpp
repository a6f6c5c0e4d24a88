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
                      std::pair{"cpu,momentum=1.5", "momentum=1.5"}, std::pair{"cpu,schedule=cosine", "schedule=cosine"},
                      std::pair{"cpu,lstm=gru", "lstm=gru"}, std::pair{"cpu,data=imagenet", "data=imagenet"}));
