// libFuzzer target: a recording's manifest.json (readRecording, engine/src/record/recording.cpp,
// then summarizeRecording). The input is the manifest; the folder also holds two small valid
// lane files, lane-0.jsonl and lane-1.jsonl. Only devicerace::Error may escape.
#include "fuzz_recording.h"
#include "fuzz_util.h"

using namespace devicerace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const auto dir = [] {
        auto d = fuzz::scratchDir() / "recording";
        std::filesystem::create_directories(d);
        const std::string lane0 =
            R"({"kind":"state","lane":"a","step":0,"samples":0,"t":0.0,"state":"running","message":""})"
            "\n"
            R"({"kind":"train","lane":"a","step":10,"samples":640,"t":1.5,"loss":2.1,"samples_per_sec":420.0,"steps_per_sec":6.6})"
            "\n"
            R"({"kind":"eval","lane":"a","step":10,"samples":640,"t":1.9,"accuracy":0.5,"epoch":1.0})"
            "\n";
        const std::string lane1 =
            R"({"kind":"train","lane":"b","step":5,"samples":320,"t":1.0,"loss":1.0,"samples_per_sec":300.0})"
            "\n"
            R"({"kind":"state","lane":"b","step":5,"samples":320,"t":1.2,"state":"finished","message":"done"})"
            "\n";
        fuzz::writeFile(d / "lane-0.jsonl", lane0);
        fuzz::writeFile(d / "lane-1.jsonl", lane1);
        return d;
    }();
    fuzz::writeFile(dir / "manifest.json", fuzz::asView(data, size));
    fuzz::readAndSummarize(dir);
    return 0;
}
