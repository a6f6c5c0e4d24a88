// Fuzz-only stand-ins for the few engine symbols the parsers reach that live in LibTorch
// sources (so the fuzz build links no torch). Each is a FIXED, DOCUMENTED FAKE, not the real
// thing; nothing here is used outside tests/fuzz.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "fuzz_util.h"
#include "data/data_util.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/lane.h"
#include "devicerace/race.h"
#include "devicerace/workload.h"
#include "workers/workload_schema.h"

namespace devicerace {

namespace {

DeviceReport fakeReport(bool withGpus) {
    DeviceReport r;
    r.cpu.model = "Fuzz CPU";
    r.cpu.physicalCores = 4;
    r.cpu.logicalCpus = 8;
    r.cpu.torchThreads = 4;
    r.cpu.blas = "fake";
    r.torchVersion = "0.0.0-fuzz";
    r.hostName = "fuzzhost";
    if (withGpus) {
        r.cudaAvailable = true;
        for (int i = 0; i < 2; ++i) {
            GpuInfo g;
            g.index = i;
            g.name = "Fuzz GPU";
            g.totalMemoryBytes = 16ull << 30;
            r.gpus.push_back(g);
        }
    } else {
        r.cudaUnavailableReason = "fuzz build: no CUDA";
    }
    return r;
}

bool g_withGpus = false;

} // namespace

namespace fuzz {
void setFakeGpus(bool withGpus) { g_withGpus = withGpus; }
} // namespace fuzz

// FAKE (real one: src/devices/device_report.cpp, probes LibTorch): a machine with 4 physical
// cores and, when a driver asks for it (fuzz::setFakeGpus), 2 CUDA devices; fixed values.
const DeviceReport& deviceReport() {
    static const DeviceReport cpuOnly = fakeReport(false);
    static const DeviceReport withGpus = fakeReport(true);
    return g_withGpus ? withGpus : cpuOnly;
}

// FAKE (real one: src/models/models.cpp builds each network to count its parameters): the
// real registry's names with default fields; unknown names throw UsageError as the real one.
const std::vector<WorkloadInfo>& workloads() {
    static const std::vector<WorkloadInfo> infos = [] {
        std::vector<WorkloadInfo> out;
        for (const char* name :
             {"fashion-mlp", "fashion-cnn", "cifar-resnet20", "cifar-resnet32", "cifar-resnet56", "cifar-vgg",
              "davidnet", "imdb-bilstm", "fasttext", "charlstm", "char-gpt", "char-gpt-6l", "imagenet-resnet50"}) {
            WorkloadInfo w;
            w.name = name;
            w.parameters = 1000;
            out.push_back(w);
        }
        return out;
    }();
    return infos;
}

const WorkloadInfo& findWorkload(const std::string& name) {
    for (const auto& w : workloads()) {
        if (w.name == name) {
            return w;
        }
    }
    throw UsageError("unknown workload '" + name + "' (fuzz shim)");
}

// FAKE (real one: src/models/models.cpp reads the registry's fixed fields): no language model
// in the shim's list, so no tokens.
std::int64_t tokensPerSampleOf(const std::string&) { return 0; }

// FAKE (real one: src/race/make_lane.cpp builds thread, worker and data-parallel lanes): no
// target starts a race; race.cpp is linked only for the summary functions a recording's
// summary uses. Reaching this is a bug in a driver.
std::unique_ptr<Lane> makeLane(LaneSpec, LaneRunSettings) {
    std::fprintf(stderr, "fuzz shim: makeLane is not available in the fuzz build\n");
    std::abort();
}

// FAKE (real ones: src/race/race.cpp, not in this build): a RecordingWriter (recording.cpp)
// reads its race through these; no target writes a recording. Reaching one is a bug in a driver.
[[noreturn]] static void noRace(const char* what) {
    std::fprintf(stderr, "fuzz shim: Race::%s is not available in the fuzz build\n", what);
    std::abort();
}
const RaceSpec& Race::spec() const { noRace("spec"); }
const Dataset& Race::dataset() const { noRace("dataset"); }
std::vector<Lane*> Race::lanes() const { noRace("lanes"); }

} // namespace devicerace

namespace devicerace::detail {

// FAKE (real ones: src/workers/workload_schema.cpp, built from the model registry): a config
// message carries them to the lane programs, and no parser here reads them back. The entry
// names the workload (unknown names throw UsageError, as the real one); the constants are fixed.
nlohmann::json workloadSchemaEntry(const std::string& name) { return {{"name", findWorkload(name).name}}; }
nlohmann::json sharedConstants() { return {{"fuzz_build", true}}; }

// REPLACEMENT (real one: src/data/data_util.cpp, renamed away in this build by
// tests/fuzz/CMakeLists.txt): loads every time instead of caching per path, so each fuzz
// input is parsed rather than answered from the cache of an earlier one.
std::shared_ptr<const Dataset> cachedLoad(const std::string&, const std::filesystem::path&, std::optional<std::int64_t>,
                                          std::optional<std::int64_t>, const std::string&,
                                          const std::function<std::shared_ptr<Dataset>()>& load) {
    return load();
}

} // namespace devicerace::detail
