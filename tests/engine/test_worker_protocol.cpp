// The worker protocol's pieces, alone: line framing, message parsing, config and ready
// messages, device reports, ssh targets and the new lane keys.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/lane_spec.h"
#include "devicerace/recording.h"
#include "devices/cpu_info.h"
#include "lanes/lane_fields.h"
#include "devicerace/lane_keys.h"
#include "workers/child_process.h"
#include "workers/protocol.h"
#include "test_util.h"

using namespace devicerace;
using namespace devicerace::detail;

namespace {

std::vector<std::string> split(LineSplitter& s, std::string_view bytes) {
    std::vector<std::string> out;
    s.feed(bytes, [&](std::string&& l) { out.push_back(std::move(l)); });
    return out;
}

} // namespace

TEST(LineSplitter, CutsLinesAcrossChunksAndStripsCarriageReturns) {
    LineSplitter s(100);
    EXPECT_TRUE(split(s, "{\"a\":").empty());
    EXPECT_EQ(s.partial(), "{\"a\":");
    auto lines = split(s, "1}\r\nsecond\nthi");
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0], "{\"a\":1}");
    EXPECT_EQ(lines[1], "second");
    EXPECT_EQ(split(s, "rd\n"), std::vector<std::string>{"third"});
}

TEST(LineSplitter, DropsAndCountsOverlongLinesWithoutKeepingThem) {
    LineSplitter s(10);
    auto lines = split(s, "short\n" + std::string(25, 'x'));
    EXPECT_EQ(lines, std::vector<std::string>{"short"});
    EXPECT_TRUE(s.partial().empty()); // nothing of the long line is held
    lines = split(s, std::string(1000, 'y') + "\nafter\n");
    EXPECT_EQ(lines, std::vector<std::string>{"after"});
    EXPECT_EQ(s.droppedLines(), 1u);
}

TEST(WorkerMessage, OnlyJsonObjectsWithAStringTypeAreMessages) {
    EXPECT_FALSE(parseMessage(""));
    EXPECT_FALSE(parseMessage("Welcome to gpubox!"));
    EXPECT_FALSE(parseMessage("[1,2,3]"));
    EXPECT_FALSE(parseMessage("{\"type\": 3}"));
    EXPECT_FALSE(parseMessage("{\"kind\": \"train\"}"));
    EXPECT_FALSE(parseMessage("{\"type\": \"hb\""));   // cut off
    EXPECT_FALSE(parseMessage(std::string(100, '{'))); // absurd nesting
    EXPECT_FALSE(parseMessage("{\"type\":\"x\",\"a\":" + std::string(200, '[') + std::string(200, ']') + "}"));
    auto m = parseMessage(R"({"type":"hb","cpu":1.5,"unknown":{"x":1}})");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->type, "hb");
    EXPECT_DOUBLE_EQ(m->body["cpu"].get<double>(), 1.5);
}

TEST(WorkerMessage, EncodedMessagesAreOneLineEvenWithNewlinesAndBadUtf8Inside) {
    auto line = encodeMessage({{"type", "log"}, {"message", "two\nlines \xff\xfe"}});
    EXPECT_EQ(line.find('\n'), line.size() - 1);
    auto m = parseMessage(line.substr(0, line.size() - 1));
    ASSERT_TRUE(m);
    EXPECT_EQ(m->type, "log");
}

TEST(WorkerMessage, ProtocolVersionsAreMajorDotMinor) {
    EXPECT_EQ(protoMajor("1.0"), 1);
    EXPECT_EQ(protoMajor("12.7"), 12);
    EXPECT_FALSE(protoMajor("1"));
    EXPECT_FALSE(protoMajor("x.1"));
    EXPECT_FALSE(protoMajor(""));
    EXPECT_EQ(protoMajor(protoVersion()), kProtoMajor);
}

TEST(WorkerMessage, ConfigRoundTripsTheLaneAndTheRunSettings) {
    auto spec = parseLaneSpec("ssh://me@gpubox:2222/cuda:0,threads=3,batch=64,lr=0.01,precision=bf16,name=box,"
                              "cli=/opt/dr/bin/devicerace-cli,fault=throw:7");
    LaneRunSettings s;
    s.workload = "fashion-cnn";
    s.dataMode = DataMode::Synthetic;
    s.dataDir = "/data/x";
    s.trainLimit = 500;
    s.steps = 40;
    s.targetAccuracy = 0.8;
    s.seed = 9;
    s.evalEverySteps = 10;
    s.warmupSteps = 3;
    auto [back, settings] = configFromMessage(configMessage(spec, s));
    EXPECT_TRUE(back.host.empty()); // the worker runs it where it is
    EXPECT_FALSE(back.cli);         // and never learns a program name from the parent
    EXPECT_EQ(back.device, "cuda:0");
    EXPECT_EQ(back.threads, 3);
    EXPECT_EQ(back.batch, 64);
    EXPECT_EQ(back.precision, Precision::Bf16);
    EXPECT_EQ(back.name, "box");
    ASSERT_TRUE(back.fault);
    EXPECT_EQ(back.fault->text(), "throw:7");
    EXPECT_EQ(settings.workload, "fashion-cnn");
    EXPECT_EQ(settings.dataMode, DataMode::Synthetic);
    EXPECT_EQ(settings.dataDir, "/data/x");
    EXPECT_EQ(settings.trainLimit, 500);
    EXPECT_EQ(settings.steps, 40);
    EXPECT_EQ(settings.seed, 9u);
    EXPECT_EQ(settings.evalEverySteps, 10);
    EXPECT_EQ(settings.warmupSteps, 3);
}

TEST(WorkerMessage, ConfigIsCheckedAsStrictlyAsTheCommandLine) {
    auto m = configMessage(parseLaneSpec("cpu"), LaneRunSettings{});
    auto bad = m;
    bad["lane_fields"]["threads"] = 0;
    EXPECT_THROW(configFromMessage(bad), UsageError);
    bad = m;
    bad["lane_fields"]["threads"] = "2"; // each field in its key's JSON type
    EXPECT_THROW(configFromMessage(bad), UsageError);
    bad = m;
    bad["lane_fields"]["colour"] = "red";
    EXPECT_THROW(configFromMessage(bad), UsageError);
    bad = m;
    bad["lane_fields"]["device"] = "ssh://elsewhere/cpu";
    EXPECT_THROW(configFromMessage(bad), UsageError);
    bad = m;
    bad["lane_fields"]["fault"] = {{"kind", "segv"}, {"step", -1}};
    EXPECT_THROW(configFromMessage(bad), UsageError);
    // A parent of protocol 1.0 sends the lane as text only: read by the same parser.
    bad = m;
    bad.erase("lane_fields");
    bad["lane"] = "cpu,threads=0";
    EXPECT_THROW(configFromMessage(bad), UsageError);
    bad = m;
    bad["steps"] = -4;
    EXPECT_THROW(configFromMessage(bad), DataError);
    bad = m;
    bad["seed"] = "nine";
    EXPECT_THROW(configFromMessage(bad), DataError);
    bad = m;
    bad.erase("workload");
    EXPECT_THROW(configFromMessage(bad), DataError);
}

TEST(WorkerMessage, ReadyCarriesTheResolvedLaneAndItsData) {
    ReadyInfo r;
    r.batch = 128;
    r.totalSteps = 469;
    r.threads = 2;
    r.datasetName = "Fashion-MNIST";
    r.trainCount = 60000;
    r.testCount = 10000;
    auto back = readyFromMessage(readyMessage(r));
    EXPECT_EQ(back.batch, 128);
    EXPECT_EQ(back.totalSteps, 469);
    EXPECT_EQ(back.threads, 2);
    EXPECT_EQ(back.datasetName, "Fashion-MNIST");
    EXPECT_EQ(back.trainCount, 60000);
    EXPECT_EQ(back.vocabulary, 0);
    auto bad = readyMessage(r);
    bad["batch"] = -1; // 0 is "not known yet" (a script lane's batch is its command's)
    EXPECT_THROW(readyFromMessage(bad), DataError);
    // A text's alphabet: one text per id, or the message is malformed.
    r.vocabulary = 3;
    r.tokenText = {"\n", "a", "\u00e9"};
    back = readyFromMessage(readyMessage(r));
    EXPECT_EQ(back.vocabulary, 3);
    EXPECT_EQ(back.tokenText, r.tokenText);
    bad = readyMessage(r);
    bad["dataset"]["tokens"].erase(0);
    EXPECT_THROW(readyFromMessage(bad), DataError);
    bad = readyMessage(r);
    bad["dataset"]["tokens"][1] = 7;
    EXPECT_THROW(readyFromMessage(bad), DataError);
}

// Found by fuzzing (tests/fuzz, target protocol): a number too large for its integer field
// (here 6e38 in ready.dataset.train) was converted with an unchecked cast, undefined behaviour;
// an integer past int's range wrapped silently. Both are malformed messages now.
TEST(WorkerMessage, NumbersOutOfTheirFieldsRangeAreMalformed) {
    ReadyInfo r;
    r.batch = 128;
    r.totalSteps = 469;
    r.datasetName = "Fashion-MNIST";
    auto ready = readyMessage(r);
    ready["dataset"]["train"] = 6.00056e38;
    try {
        readyFromMessage(ready);
        ADD_FAILURE() << "accepted";
    } catch (const DataError& e) {
        EXPECT_NE(std::string(e.what()).find("malformed ready message"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("\"train\" is 6.00056e+38, out of range"), std::string::npos) << e.what();
    }
    ready = readyMessage(r);
    ready["threads"] = 4294967298.0;
    EXPECT_THROW(readyFromMessage(ready), DataError);
    ready = readyMessage(r);
    ready["total_steps"] = -1e19;
    EXPECT_THROW(readyFromMessage(ready), DataError);

    LaneRunSettings s;
    s.workload = "fashion-mlp";
    s.dist = DistConfig{};
    s.dist->rank = 0;
    s.dist->world = 2;
    s.dist->backend = "gloo";
    auto config = configMessage(parseLaneSpec("cpu"), s);
    EXPECT_NO_THROW(configFromMessage(config));
    for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"epochs", 4294967297}, {"seed", -1}, {"warmup", 1e300}, {"fail_at_step", -9.3e18}}) {
        auto bad = config;
        bad[key] = value;
        EXPECT_THROW(configFromMessage(bad), DataError) << key << "=" << value.dump();
    }
    auto bad = config;
    bad["dist"]["world"] = 1e10; // wrapped to a plausible world size before
    EXPECT_THROW(configFromMessage(bad), DataError);
    bad = config;
    bad["dist"]["store_port"] = 4294967296 + 29500;
    EXPECT_THROW(configFromMessage(bad), DataError);

    EXPECT_THROW(deviceReportFromJson(R"({"cpu":{"model":"x","physical_cores":1e20,"logical_cpus":1},"gpus":[],)"
                                      R"("cuda_available":false})"),
                 DataError);
    EXPECT_THROW(deviceReportFromJson(R"({"cpu":{"model":"x","physical_cores":1,"logical_cpus":1},"gpus":[{"index":0,)"
                                      R"("name":"g","total_memory_bytes":-1}],"cuda_available":true})"),
                 DataError);
}

TEST(DeviceReportJson, RoundTripsEveryField) {
    DeviceReport r;
    r.cpu.model = "AMD EPYC";
    r.cpu.physicalCores = 16;
    r.cpu.logicalCpus = 32;
    r.cpu.blas = "MKL";
    r.cpu.bf16Units = "AMX";
    r.cpu.amxNotExposed = true;
    r.cudaAvailable = true;
    r.gpus.push_back(GpuInfo{0, "NVIDIA H100 80GB HBM3", 85'000'000'000ULL, 9, 0, 132, 37, 1'000'000ULL});
    r.torchVersion = "2.11.0";
    r.hostName = "gpubox";
    auto back = deviceReportFromJson(deviceReportToJson(r));
    EXPECT_EQ(back.cpu.model, "AMD EPYC");
    EXPECT_EQ(back.cpu.physicalCores, 16);
    EXPECT_EQ(back.cpu.bf16Units, "AMX");
    EXPECT_TRUE(back.cpu.amxNotExposed);
    // A report from an older peer has no such field: false.
    auto older = nlohmann::json::parse(deviceReportToJson(r));
    older["cpu"].erase("amx_not_exposed");
    EXPECT_FALSE(deviceReportFromJson(older.dump()).cpu.amxNotExposed);
    ASSERT_EQ(back.gpus.size(), 1u);
    EXPECT_EQ(back.gpus[0].name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(back.gpus[0].totalMemoryBytes, 85'000'000'000ULL);
    EXPECT_EQ(back.gpus[0].computeMajor, 9);
    EXPECT_EQ(back.gpus[0].utilizationPercent, 37);
    EXPECT_TRUE(back.cudaAvailable);
    EXPECT_EQ(back.hostName, "gpubox");
    EXPECT_THROW(deviceReportFromJson("{\"cpu\": 3}"), DataError);
    EXPECT_THROW(deviceReportFromJson("not json"), DataError);
}

// bf16 hardware from the CPU's flags, whatever the vendor: AMX first, then AVX-512 BF16.
TEST(CpuFlags, Bf16UnitsFromTheFlagsLine) {
    EXPECT_EQ(detail::bf16UnitsOf("fpu sse2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"), "AMX");
    EXPECT_EQ(detail::bf16UnitsOf("fpu avx2 avx512f avx512_bf16"), "AVX-512 BF16");
    EXPECT_EQ(detail::bf16UnitsOf("fpu avx2 fma"), "");
    EXPECT_EQ(detail::bf16UnitsOf("amx_bf16x avx512_bf16y"), ""); // whole words only
    EXPECT_EQ(detail::bf16UnitsOf(""), "");
}

// An Intel Xeon model that has AMX (Sapphire, Emerald, Granite Rapids) without amx_bf16 in its
// flags: a VM that hides it or an old kernel, where bf16 runs on AVX-512 BF16 at half the fp32 rate.
TEST(CpuFlags, AnAmxXeonModelWithoutAmxIsNamed) {
    const std::string noAmx = "fpu avx512f avx512_bf16 avx512_fp16", amx = noAmx + " amx_bf16 amx_tile";
    EXPECT_TRUE(detail::amxModelWithoutAmx("GenuineIntel", 6, 207, noAmx)); // Emerald Rapids
    EXPECT_TRUE(detail::amxModelWithoutAmx("GenuineIntel", 6, 143, noAmx)); // Sapphire Rapids
    EXPECT_FALSE(detail::amxModelWithoutAmx("GenuineIntel", 6, 143, amx));
    EXPECT_FALSE(detail::amxModelWithoutAmx("GenuineIntel", 6, 106, noAmx)); // Ice Lake: no AMX to hide
    EXPECT_FALSE(detail::amxModelWithoutAmx("AuthenticAMD", 25, 17, noAmx)); // Zen 4
    EXPECT_FALSE(detail::amxModelWithoutAmx("AuthenticAMD", 6, 207, noAmx));
}

// A container's CPU quota, from cgroup v2's cpu.max or v1's cfs files: the tightest one on the
// way from the process's cgroup up to the hierarchy's root.
TEST(CpuQuota, ReadFromTheCgroupFiles) {
    EXPECT_DOUBLE_EQ(detail::quotaCoresFromCpuMax("150000 100000").value_or(-1), 1.5);
    EXPECT_DOUBLE_EQ(detail::quotaCoresFromCpuMax("50000 100000\n").value_or(-1), 0.5);
    EXPECT_FALSE(detail::quotaCoresFromCpuMax("max 100000"));
    EXPECT_FALSE(detail::quotaCoresFromCpuMax(""));
    EXPECT_FALSE(detail::quotaCoresFromCpuMax("0 100000"));
    EXPECT_FALSE(detail::quotaCoresFromCpuMax("12x 100000"));
    EXPECT_DOUBLE_EQ(detail::quotaCoresFromCfs("200000", "100000").value_or(-1), 2.0);
    EXPECT_FALSE(detail::quotaCoresFromCfs("-1", "100000"));
    EXPECT_FALSE(detail::quotaCoresFromCfs("", ""));

    const auto write = [](const std::filesystem::path& file, const std::string& text) {
        std::filesystem::create_directories(file.parent_path());
        std::ofstream(file) << text;
    };
    test::TempDir v2;
    EXPECT_FALSE(detail::cpuQuotaCores(v2.path().string())); // nothing readable: no quota
    write(v2.path() / "proc/self/cgroup", "0::/box/lane\n");
    write(v2.path() / "sys/fs/cgroup/box/lane/cpu.max", "max 100000\n");
    write(v2.path() / "sys/fs/cgroup/box/cpu.max", "150000 100000\n");
    write(v2.path() / "sys/fs/cgroup/cpu.max", "400000 100000\n");
    EXPECT_DOUBLE_EQ(detail::cpuQuotaCores(v2.path().string()).value_or(-1), 1.5);

    test::TempDir v1;
    write(v1.path() / "proc/self/cgroup", "5:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n");
    write(v1.path() / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    write(v1.path() / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    write(v1.path() / "sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us", "75000\n");
    write(v1.path() / "sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
    EXPECT_DOUBLE_EQ(detail::cpuQuotaCores(v1.path().string()).value_or(-1), 0.75);

    test::TempDir root; // a container's namespace: its cgroup is the mount's root
    write(root.path() / "proc/self/cgroup", "1:cpu:/\n");
    write(root.path() / "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "100000\n");
    write(root.path() / "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
    EXPECT_DOUBLE_EQ(detail::cpuQuotaCores(root.path().string()).value_or(-1), 1.0);

    const double here = detail::usableCores(64);
    EXPECT_GT(here, 0);
    EXPECT_LE(here, deviceReport().cpu.logicalCpus);
    EXPECT_LE(detail::usableCores(1), 1.0);
}

TEST(SshTarget, ParsesUserHostAndPort) {
    auto t = parseSshTarget("ssh://alice@gpubox.example.com:2222");
    EXPECT_EQ(t.user, "alice");
    EXPECT_EQ(t.host, "gpubox.example.com");
    EXPECT_EQ(t.port, 2222);
    EXPECT_EQ(t.url(), "ssh://alice@gpubox.example.com:2222");
    t = parseSshTarget("ssh://gpubox/");
    EXPECT_EQ(t.user, "");
    EXPECT_EQ(t.host, "gpubox");
    EXPECT_FALSE(t.port);
    EXPECT_EQ(parseSshTarget("ssh://[::1]:22").host, "[::1]");
}

TEST(SshTarget, RefusesWhatSshOrAShellWouldActOn) {
    for (const char* bad :
         {"gpubox", "ssh://", "ssh://-oProxyCommand=evil", "ssh://host:0", "ssh://host:99999", "ssh://host:22x",
          "ssh://a b", "ssh://host;rm", "ssh://$(id)", "ssh://@host", "ssh://-l@host", "ssh://ho`st"}) {
        EXPECT_THROW(parseSshTarget(bad), UsageError) << bad;
    }
}

TEST(LaneSpecWorkers, RemoteDevicesIsolationCliAndFaults) {
    auto remote = parseLaneSpec("ssh://gpubox/cuda:1,batch=256");
    EXPECT_EQ(remote.host, "ssh://gpubox");
    EXPECT_EQ(remote.device, "cuda:1");
    EXPECT_EQ(laneKind(remote), LaneKind::Remote);
    EXPECT_EQ(formatLaneSpec(remote), "ssh://gpubox/cuda:1,batch=256");
    auto process = parseLaneSpec("cpu,isolate=process,fault=segv:30");
    EXPECT_EQ(laneKind(process), LaneKind::Process);
    ASSERT_TRUE(process.fault);
    EXPECT_EQ(process.fault->text(), "segv:30");
    EXPECT_EQ(parseLaneSpec(formatLaneSpec(process)).fault, process.fault);
    EXPECT_EQ(laneKind(parseLaneSpec("cpu")), LaneKind::Thread);
    EXPECT_EQ(laneKind(parseLaneSpec("cpu,isolate=thread")), LaneKind::Thread);
    EXPECT_THROW(parseLaneSpec("ssh://gpubox"), UsageError);
    EXPECT_THROW(parseLaneSpec("ssh://gpubox/tpu"), UsageError);
    EXPECT_THROW(parseLaneSpec("cpu,isolate=vm"), UsageError);
    EXPECT_THROW(parseLaneSpec("cpu,fault=explode"), UsageError);
    EXPECT_THROW(parseLaneSpec("cpu,fault=abort:-1"), UsageError);
    EXPECT_NO_THROW(parseLaneSpec("cpu,fault=abort:0")); // step 0: before training starts
}

TEST(WorkerMessage, DataParallelRanksTravelInConfigAndReady) {
    LaneRunSettings s;
    s.workload = "fashion-mlp";
    DistConfig d;
    d.rank = 1;
    d.world = 4;
    d.backend = "gloo";
    d.storeHost = "10.0.0.5";
    d.storePort = 41234;
    d.bindHost = "";
    d.timeoutSeconds = 30;
    d.fixedGlobalBatch = true;
    s.dist = d;
    auto [spec, back] = configFromMessage(configMessage(parseLaneSpec("cpu,threads=1"), s));
    ASSERT_TRUE(back.dist);
    EXPECT_EQ(back.dist->rank, 1);
    EXPECT_EQ(back.dist->world, 4);
    EXPECT_EQ(back.dist->storeHost, "10.0.0.5");
    EXPECT_EQ(back.dist->storePort, 41234);
    EXPECT_DOUBLE_EQ(back.dist->timeoutSeconds, 30);
    EXPECT_TRUE(back.dist->fixedGlobalBatch);
    // Out of range: refused, never trusted.
    for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"rank", 4}, {"world", 0}, {"backend", "mpi"}, {"store_port", 70000}, {"timeout", 0}}) {
        auto m = configMessage(parseLaneSpec("cpu"), s);
        m["dist"][key] = value;
        EXPECT_THROW(configFromMessage(m), DataError) << key;
    }
    auto m = configMessage(parseLaneSpec("cpu"), s);
    m["dist"]["store_host"] = "";
    EXPECT_THROW(configFromMessage(m), DataError) << "rank 1 without a store";
    // A worker is one rank, never a whole data-parallel lane.
    m = configMessage(parseLaneSpec("cpu"), LaneRunSettings{});
    m["lane_fields"]["workers"] = 2;
    EXPECT_THROW(configFromMessage(m), UsageError);
    // Rank 0 says where its store listens.
    ReadyInfo r;
    r.batch = 64;
    r.totalSteps = 10;
    r.datasetName = "x";
    r.storePort = 40000;
    EXPECT_EQ(readyFromMessage(readyMessage(r)).storePort, 40000);
    r.storePort.reset();
    EXPECT_FALSE(readyFromMessage(readyMessage(r)).storePort);
}

TEST(WorkerMessage, DataParallelSpecsRoundTrip) {
    for (const auto* text : {"cpu,threads=1,workers=2", "cuda:0-7,backend=nccl,global_batch=fixed",
                             "ssh://a/cpu+ssh://b:2222/cpu,threads=8,master=10.0.0.5,name=two-hosts"}) {
        EXPECT_EQ(formatLaneSpec(parseLaneSpec(text)), text);
    }
}

// Every lane key of the table round-trips: the text a user types, parsed, travels to a worker as
// typed JSON fields and comes back as the same lane; the text form as well. A key added to the
// table without a sample here fails the coverage check.
TEST(LaneKeys, EveryKeyRoundTripsThroughTheWorkerProtocol) {
    const std::vector<std::string> lanes = {
        "cpu,threads=3,batch=64,lr=0.0125,precision=bf16,cost=0.75,channels_last=true,eval_batch=500,wd=0.0005,"
        "momentum=0.9,schedule=onecycle,lstm=cells,data=synthetic,augment=crop-flip,fused=false,graph=false,resident="
        "true,"
        "isolate=process,fault=segv:0,framework=devicerace,name=every key",
        "cuda:0-3,threads=2,fault=abort:5@2,workers=2,backend=nccl,global_batch=fixed,master=10.0.0.1,name=ranks",
        "cuda:1,precision=fp16,cmd=my-trainer --fast,name=theirs",
        "cpu,framework=keras-jax,fault=hang,cli=/opt/dr/bin/devicerace-cli",
        "slurm://me@login1:2222/cuda:0-7,workers=2,backend=nccl,nodes=8,partition=gpu,time=20,queue=1800,port=29555,"
        "name=cluster",
        "attach://10.0.0.5:29400/cpu,threads=4,token_file=/run/job.token,name=job",
        "cpu,threads=2,framework=script,instrument=false,printed=false,logdir=runs/a,loss_tag=train/"
        "loss,acc_tag=val.*acc,quiet=30,"
        "workdir=/srv/train,copy=/home/me/train,args=--compile --batch '256',name=mine",
    };
    std::set<std::string> covered;
    for (const auto& text : lanes) {
        SCOPED_TRACE(text);
        const auto spec = parseLaneSpec(text);
        EXPECT_EQ(parseLaneSpec(formatLaneSpec(spec)), spec) << formatLaneSpec(spec);
        const auto fields = laneToFields(spec);
        for (const auto& [key, value] : fields.items()) {
            covered.insert(key);
            EXPECT_FALSE(value.is_string() && findLaneKey(key) && findLaneKey(key)->type == LaneKeyType::Integer)
                << key << " travels as text";
        }
        EXPECT_EQ(laneFromFields(fields), spec) << fields.dump();
        // Through a worker's config (which drops what a worker must not learn: host, cli, cmd).
        if (!spec.launcher.empty()) {
            // The launcher's lane never travels: rank 0 gets launchedMemberSpec's.
            EXPECT_THROW(configFromMessage(configMessage(spec, LaneRunSettings{})), UsageError);
        } else if (!spec.cmd && laneKind(spec) != LaneKind::Parallel) {
            auto [back, settings] = configFromMessage(configMessage(spec, LaneRunSettings{}));
            LaneSpec expected = spec;
            expected.isolate.reset();
            expected.cli.reset(); // a worker never learns a program name from its parent
            EXPECT_EQ(formatLaneSpec(back), formatLaneSpec(expected));
        }
    }
    for (const auto& key : laneKeys()) {
        EXPECT_TRUE(covered.count(key.name)) << "no round-trip sample for lane key " << key.name;
        EXPECT_FALSE(key.help.empty()) << key.name;
        EXPECT_NE(laneKeysHelp().find("  " + key.name), std::string::npos) << key.name;
    }
    // Typed: an integer key refuses a string, a fault is an object.
    EXPECT_EQ(laneToFields(parseLaneSpec("cpu,threads=2")).at("threads"), 2);
    EXPECT_EQ(laneToFields(parseLaneSpec("cpu,fault=throw:3@1")).at("fault"),
              nlohmann::json({{"kind", "throw"}, {"step", 3}, {"rank", 1}}));
}

// A worker of a spinning race starts with OMP_WAIT_POLICY removed and DEVICERACE_OMP_WAIT=spin
// whatever its parent's environment says (the window's is passive).
TEST(ChildProcess, StartsWithTheEnvironmentChangesItWasGiven) {
    ::setenv("DEVICERACE_TEST_DROP", "1", 1);
    ::setenv("DEVICERACE_TEST_KEEP", "kept", 1);
    ::setenv("DEVICERACE_TEST_SET", "old", 1);
    EnvChanges env;
    env.unset = {"DEVICERACE_TEST_DROP", "DEVICERACE_TEST_ABSENT"};
    env.set = {{"DEVICERACE_TEST_SET", "new"}, {"DEVICERACE_TEST_ADDED", "a=b"}};
    const auto all = environmentWith(env);
    auto has = [&](const std::string& entry) { return std::find(all.begin(), all.end(), entry) != all.end(); };
    EXPECT_TRUE(has("DEVICERACE_TEST_KEEP=kept"));
    EXPECT_TRUE(has("DEVICERACE_TEST_SET=new"));
    EXPECT_TRUE(has("DEVICERACE_TEST_ADDED=a=b"));
    EXPECT_FALSE(has("DEVICERACE_TEST_SET=old"));
    EXPECT_EQ(std::count_if(all.begin(), all.end(),
                            [](const std::string& e) { return e.rfind("DEVICERACE_TEST_DROP", 0) == 0; }),
              0);
    ChildProcess child({"/bin/sh", "-c",
                        "echo \"${DEVICERACE_TEST_DROP-unset} $DEVICERACE_TEST_KEEP $DEVICERACE_TEST_SET "
                        "$DEVICERACE_TEST_ADDED\""},
                       env);
    std::string out;
    char buf[256];
    for (ssize_t n; (n = ::read(child.stdoutFd(), buf, sizeof buf)) > 0;) {
        out.append(buf, static_cast<std::size_t>(n));
    }
    EXPECT_EQ(out, "unset kept new a=b\n");
    for (const char* name : {"DEVICERACE_TEST_DROP", "DEVICERACE_TEST_KEEP", "DEVICERACE_TEST_SET"}) {
        ::unsetenv(name);
    }
}
