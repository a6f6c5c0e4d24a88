// Energy counters (devices/energy.h) against a fake powercap tree in a temporary folder: the
// package zones found, sub-zones skipped, wrap-arounds undone, unreadable and absent counters said.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "devices/energy.h"
#include "test_util.h"

using namespace devicerace;
using namespace devicerace::detail;
namespace fs = std::filesystem;

namespace {

void zone(const fs::path& root, const std::string& dir, const std::string& name, double uj, double range = 1e9) {
    fs::create_directories(root / dir);
    std::ofstream(root / dir / "name") << name << "\n";
    std::ofstream(root / dir / "energy_uj") << static_cast<long long>(uj) << "\n";
    std::ofstream(root / dir / "max_energy_range_uj") << static_cast<long long>(range) << "\n";
}

void setEnergy(const fs::path& root, const std::string& dir, double uj) {
    std::ofstream(root / dir / "energy_uj") << static_cast<long long>(uj) << "\n";
}

} // namespace

TEST(Energy, RaplPackagesAreSummedAndWrapAroundsUndone) {
    test::TempDir dir;
    const auto root = dir.path();
    zone(root, "intel-rapl:0", "package-0", 5'000'000, 10'000'000);
    zone(root, "intel-rapl:1", "package-1", 1'000'000);
    zone(root, "intel-rapl:0:0", "core", 7'000'000); // a sub-zone: part of package-0 already
    zone(root, "intel-rapl:2", "psys", 9'000'000);   // the platform: not a package
    auto meter = EnergyMeter::cpu(root);
    ASSERT_TRUE(meter.measurable()) << meter.source();
    EXPECT_EQ(meter.source(), "RAPL package-0 + package-1");
    EXPECT_EQ(*meter.read(), 0.0); // the first read starts the count
    setEnergy(root, "intel-rapl:0", 7'500'000);
    setEnergy(root, "intel-rapl:1", 2'000'000);
    EXPECT_DOUBLE_EQ(*meter.read(), 3.5);
    setEnergy(root, "intel-rapl:0", 500'000); // wrapped past 10 J: 2.5 + 0.5
    EXPECT_DOUBLE_EQ(*meter.read(), 3.0);
}

TEST(Energy, AbsentOrUnreadableCountersSayWhyAndReadNothing) {
    test::TempDir dir;
    auto none = EnergyMeter::cpu(dir.path() / "absent");
    EXPECT_FALSE(none.measurable());
    EXPECT_FALSE(none.read());
    EXPECT_NE(none.source().find("not measurable here: no powercap counters"), std::string::npos) << none.source();

    auto empty = EnergyMeter::cpu(dir.path());
    EXPECT_NE(empty.source().find("no RAPL package counters"), std::string::npos) << empty.source();

    if (::geteuid() != 0) { // root reads a mode-000 file anyway
        zone(dir.path(), "intel-rapl:0", "package-0", 1'000'000);
        ::chmod((dir.path() / "intel-rapl:0" / "energy_uj").c_str(), 0);
        auto locked = EnergyMeter::cpu(dir.path());
        EXPECT_FALSE(locked.measurable());
        EXPECT_NE(locked.source().find("not readable"), std::string::npos) << locked.source();
    }
}

TEST(Energy, AGpuWithoutNvmlSaysSo) {
    auto gpu = EnergyMeter::gpu(0);
    if (gpu.measurable()) {
        GTEST_SKIP() << "NVML reports energy here: " << gpu.source();
    }
    EXPECT_NE(gpu.source().find("not measurable here"), std::string::npos) << gpu.source();
    EXPECT_FALSE(gpu.read());
}
