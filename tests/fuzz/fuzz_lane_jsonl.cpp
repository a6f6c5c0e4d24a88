// libFuzzer target: a recording's lane file, one metric sample per JSON line
// (readRecording's line reader, sampleFromJsonLine in engine/src/metrics/metric_sample.cpp,
// then summarizeRecording). The input is lane-0.jsonl under a fixed valid manifest naming two
// lanes on that one file. Only devicerace::Error may escape.
#include "fuzz_recording.h"
#include "fuzz_util.h"

using namespace devicerace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const auto dir = [] {
        auto d = fuzz::scratchDir() / "recording";
        std::filesystem::create_directories(d);
        fuzz::writeFile(d / "manifest.json", R"({"format":1,"app_version":"0.1.0","workload":"fashion-mlp",
"dataset":{"name":"Fashion-MNIST","synthetic":false},"mode":"live","target_accuracy":0.85,
"started_at":"2024-01-01T00:00:00Z","device":{"cpu":"x","gpus":""},
"lanes":[{"name":"cpu","file":"lane-0.jsonl","spec":"cpu,threads=2,batch=64,cost=1.5","device":"cpu",
"kind":"thread","cost_per_hour":1.5,"total_steps":100,"batch":64},
{"name":"gpu","file":"lane-0.jsonl","spec":"cuda:0,workers=2","device":"cuda:0","kind":"parallel","total_steps":0,"batch":0}]}
)");
        return d;
    }();
    fuzz::writeFile(dir / "lane-0.jsonl", fuzz::asView(data, size));
    fuzz::readAndSummarize(dir);
    // The line parser alone too, on the whole input (what a worker's `sample` carries).
    try {
        (void)sampleFromJsonLine(std::string(fuzz::asView(data, size)));
    } catch (const Error&) {
    }
    return 0;
}
