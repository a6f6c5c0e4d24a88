#pragma once
// What DistConfig::store holds: rank 0's c10d TCPStore (served by rank 0, or the launcher's).
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace devicerace::detail {

struct StoreHolder {
    c10::intrusive_ptr<c10d::TCPStore> store;
};

} // namespace devicerace::detail
