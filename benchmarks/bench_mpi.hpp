#pragma once
//! \file bench_mpi.hpp
//! What chorus_bench_mpi's translation units share: the measured
//! collectives, the buffers and the float sum call of a policy. The
//! policies' instantiations are split between chorus_bench_mpi.cpp (the
//! engine's ring<> and hierarchical<>, automatic) and bench_mpi_policies.cpp
//! (the schedule policies) so a -j2 build compiles them side by side.

#include <chorus/mpi.hpp>

#include <span>
#include <string>
#include <vector>

namespace chorus_bench_mpi {

enum class coll_kind { all_reduce, all_gather, reduce_scatter };

inline const char* coll_name(coll_kind c) {
    switch (c) {
    case coll_kind::all_reduce: return "all_reduce";
    case coll_kind::all_gather: return "all_gather";
    case coll_kind::reduce_scatter: return "reduce_scatter";
    }
    return "?";
}

inline chorus::collective to_collective(coll_kind c) {
    switch (c) {
    case coll_kind::all_reduce: return chorus::collective::all_reduce;
    case coll_kind::all_gather: return chorus::collective::all_gather;
    case coll_kind::reduce_scatter: return chorus::collective::reduce_scatter;
    }
    return chorus::collective::all_reduce;
}

struct bufs {
    std::vector<float> in, out;
};

using comm_type = chorus::communicator<chorus::mpi>;

//! One float sum call of `coll` with policy Algo, out of place on b.
template <class Algo>
void chorus_call(comm_type& comm, coll_kind coll, bufs& b) {
    const std::span<const float> in(b.in);
    const std::span<float> out(b.out);
    switch (coll) {
    case coll_kind::all_reduce: chorus::all_reduce<Algo>(comm, in, out); break;
    case coll_kind::all_gather: chorus::all_gather<Algo>(comm, in, out); break;
    case coll_kind::reduce_scatter: chorus::reduce_scatter<Algo>(comm, in, out); break;
    }
}

//! A policy's call, picked at run time.
using chorus_fn = void (*)(comm_type&, coll_kind, bufs&);

//! bench_mpi_policies.cpp: direct, tree, recursive_doubling, rabenseifner
//! and two_shot (default tuning); nullptr for any other name.
chorus_fn schedule_policy_call(const std::string& name);

} // namespace chorus_bench_mpi
