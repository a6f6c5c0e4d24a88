// The one table of DEVICERACE_* environment variables: whole, in order, each row documented, and a
// name it lacks refused rather than read.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "devicerace/environment.h"

using namespace devicerace;

TEST(Environment, EveryRowIsNamedDocumentedAndInOrder) {
    std::string previous;
    for (const auto& s : environmentSwitches()) {
        const std::string name = s.name;
        EXPECT_EQ(name.rfind("DEVICERACE_", 0), 0u) << name;
        EXPECT_LT(previous, name) << "the table is in name order, each name once";
        const std::string audience = s.audience;
        EXPECT_TRUE(audience == "users" || audience == "tests" || audience == "benchmarks" || audience == "internal")
            << name << ": " << audience;
        EXPECT_GT(std::string(s.meaning).size(), 10u) << name;
        previous = name;
    }
}

TEST(Environment, ASwitchIsReadAndANameNotInTheTableIsRefused) {
    ::setenv("DEVICERACE_CACHE_DIR", "/tmp/somewhere", 1);
    EXPECT_STREQ(environmentSwitch("DEVICERACE_CACHE_DIR"), "/tmp/somewhere");
    ::unsetenv("DEVICERACE_CACHE_DIR");
    EXPECT_EQ(environmentSwitch("DEVICERACE_CACHE_DIR"), nullptr);
    ::setenv("DEVICERACE_NOT_A_SWITCH", "1", 1);
    try {
        (void)environmentSwitch("DEVICERACE_NOT_A_SWITCH");
        FAIL() << "a name without a row was read";
    } catch (const std::logic_error& e) {
        EXPECT_NE(std::string(e.what()).find("no such DeviceRace environment switch: DEVICERACE_NOT_A_SWITCH"),
                  std::string::npos);
    }
    ::unsetenv("DEVICERACE_NOT_A_SWITCH");
}
