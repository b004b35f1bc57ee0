#pragma once
//! \file core/collective.hpp
//! The collectives and the algorithms chorus runs, by name: the vocabulary
//! every layer shares (schedules, the cost model, backends, the public
//! calls, the tools).

#include <cstdint>
#include <string_view>

#include "config.hpp"

namespace chorus {

//! The collectives chorus schedules.
//! all_to_all and the "v" (per-rank count) variants are planned by the
//! exchange schedule (algo/exchange.hpp) whatever the policy.
enum class collective : std::uint8_t {
    all_reduce,
    all_gather,
    reduce_scatter,
    broadcast,
    reduce,
    barrier,
    all_to_all,
    all_gatherv,
    reduce_scatterv,
    all_to_allv,
};

//! True for the collectives every policy plans with the exchange schedule.
CHORUS_HD constexpr bool is_exchange(collective c) {
    return c == collective::all_to_all || c == collective::all_gatherv || c == collective::reduce_scatterv ||
           c == collective::all_to_allv;
}

CHORUS_HD constexpr const char* collective_name(collective c) {
    switch (c) {
    case collective::all_reduce: return "all_reduce";
    case collective::all_gather: return "all_gather";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::broadcast: return "broadcast";
    case collective::reduce: return "reduce";
    case collective::barrier: return "barrier";
    case collective::all_to_all: return "all_to_all";
    case collective::all_gatherv: return "all_gatherv";
    case collective::reduce_scatterv: return "reduce_scatterv";
    case collective::all_to_allv: return "all_to_allv";
    }
    return "?";
}

//! The algorithms chorus schedules (one per policy type in algo/).
enum class algorithm : std::uint8_t { ring, direct, tree, recursive_doubling, rabenseifner, two_shot, hierarchical };

inline constexpr algorithm all_algorithms[] = {algorithm::ring,         algorithm::direct,   algorithm::tree,
                                               algorithm::recursive_doubling, algorithm::rabenseifner,
                                               algorithm::two_shot,     algorithm::hierarchical};
inline constexpr int algorithm_count = int(sizeof(all_algorithms) / sizeof(all_algorithms[0]));

//! The policy's name (the `name` member of ring<>, direct<>, ...).
constexpr const char* algorithm_name(algorithm a) {
    switch (a) {
    case algorithm::ring: return "ring";
    case algorithm::direct: return "direct";
    case algorithm::tree: return "tree";
    case algorithm::recursive_doubling: return "recursive_doubling";
    case algorithm::rabenseifner: return "rabenseifner";
    case algorithm::two_shot: return "two_shot";
    case algorithm::hierarchical: return "hierarchical";
    }
    return "?";
}

//! The algorithm called `name` (as algorithm_name spells it); false if none.
constexpr bool algorithm_from_name(std::string_view name, algorithm& out) {
    for (algorithm a : all_algorithms)
        if (name == algorithm_name(a)) {
            out = a;
            return true;
        }
    return false;
}

} // namespace chorus
