//! \file bench_mpi_policies.cpp
//! chorus_bench_mpi's instantiations of the policies that run as schedules
//! on communicator<mpi> (its own translation unit, compiled in parallel
//! with chorus_bench_mpi.cpp).

#include "bench_mpi.hpp"

namespace chorus_bench_mpi {

chorus_fn schedule_policy_call(const std::string& name) {
    if (name == "direct") return &chorus_call<chorus::direct<>>;
    if (name == "tree") return &chorus_call<chorus::tree<>>;
    if (name == "recursive_doubling") return &chorus_call<chorus::recursive_doubling<>>;
    if (name == "rabenseifner") return &chorus_call<chorus::rabenseifner<>>;
    if (name == "two_shot") return &chorus_call<chorus::two_shot<>>;
    return nullptr;
}

} // namespace chorus_bench_mpi
