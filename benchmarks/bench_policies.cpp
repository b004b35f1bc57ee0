//! \file bench_policies.cpp
//! chorus_bench's instantiations of the policies other than ring<>, each
//! with its default tuning: float and every operator (its own translation
//! unit, compiled in parallel with the ring's), and the float sum call of
//! each for the interleaved comparison (the same instantiations).

#include "bench.hpp"

namespace chorus_bench {
namespace {

template <class Algo>
void sweep(bench_state& st, coll_kind c) {
    run_sweep<Algo, float, chorus::sum, chorus::prod, chorus::min, chorus::max, chorus::avg>(st, c);
}

} // namespace

const char* policy_names() {
    return "direct,tree,recursive_doubling,rabenseifner,two_shot,hierarchical,automatic,deterministic";
}

bool run_named_policy(bench_state& st, coll_kind c, type_kind t, const std::string& name) {
    if (t != type_kind::float32) return false;
    if (name == "direct") sweep<chorus::direct<>>(st, c);
    else if (name == "tree") sweep<chorus::tree<>>(st, c);
    else if (name == "recursive_doubling") sweep<chorus::recursive_doubling<>>(st, c);
    else if (name == "rabenseifner") sweep<chorus::rabenseifner<>>(st, c);
    else if (name == "two_shot") sweep<chorus::two_shot<>>(st, c);
    else if (name == "hierarchical") sweep<chorus::hierarchical<>>(st, c);
    else if (name == "automatic") sweep<chorus::automatic>(st, c);
    else if (name == "deterministic") sweep<chorus::deterministic<>>(st, c);
    else return false;
    return true;
}

float_sum_call named_policy_call(const std::string& name) {
    if (name == "direct") return &call_collective<chorus::direct<>, float, chorus::sum>;
    if (name == "tree") return &call_collective<chorus::tree<>, float, chorus::sum>;
    if (name == "recursive_doubling") return &call_collective<chorus::recursive_doubling<>, float, chorus::sum>;
    if (name == "rabenseifner") return &call_collective<chorus::rabenseifner<>, float, chorus::sum>;
    if (name == "two_shot") return &call_collective<chorus::two_shot<>, float, chorus::sum>;
    if (name == "hierarchical") return &call_collective<chorus::hierarchical<>, float, chorus::sum>;
    if (name == "automatic") return &call_collective<chorus::automatic, float, chorus::sum>;
    if (name == "deterministic") return &call_collective<chorus::deterministic<>, float, chorus::sum>;
    return nullptr;
}

} // namespace chorus_bench
