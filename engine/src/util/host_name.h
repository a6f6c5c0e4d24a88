#pragma once
// This machine's host name, as gethostname(2) gives it ("" if it cannot).
#include <unistd.h>

#include <string>

namespace devicerace::detail {

inline std::string hostName() {
    char buf[256] = {};
    ::gethostname(buf, sizeof buf - 1);
    return buf;
}

} // namespace devicerace::detail
