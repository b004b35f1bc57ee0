#pragma once
// What the MPI tests share: the world communicator, the user element types
// and operators, policies as run-time values with their names, and the
// declarations of the checkers of every collective. The checkers take the
// policy as a value and call chorus::detail::*_run (what the public
// chorus::all_reduce<Algo>(...) etc. run with policy_of<Algo>), so each
// one is compiled once per (element type, operator) and serves every
// policy. Their definitions are in mpi_checks.hpp, compiled only by the
// checks_*.cpp files, which instantiate them explicitly for the pairs the
// tests use (a pair used but not instantiated there fails at link time).

#include <doctest/doctest.h>

#include <chorus/mpi.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mpi_test {

using comm_t = chorus::communicator<chorus::mpi>;

inline comm_t& world() {
    // CHORUS_TIMEOUT_MS (set by CTest) bounds every wait.
    static comm_t comm(MPI_COMM_WORLD);
    return comm;
}

// --- user element types and operators ----------------------------------------------

struct vec3 {
    float x, y, z;
    bool operator==(const vec3&) const = default;
};
struct vec3_add {
    static constexpr bool commutative = true;
    static constexpr const char* name = "vec3_add";
    vec3 operator()(const vec3& a, const vec3& b) const { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
};
//! Arg-max: the larger value wins, ties go to the smaller index.
struct indexed {
    float value;
    int index;
    bool operator==(const indexed&) const = default;
};
struct argmax_op {
    static constexpr bool commutative = true;
    static constexpr const char* name = "argmax";
    indexed operator()(const indexed& a, const indexed& b) const {
        if (a.value != b.value) return a.value > b.value ? a : b;
        return a.index < b.index ? a : b;
    }
};
//! Not commutative and not associative: the result is right only when
//! every element is the left fold of the ranks in rank order (direct<>,
//! two_shot<>, deterministic<>).
struct shift_add {
    static constexpr bool commutative = false;
    static constexpr const char* name = "shift_add";
    std::int64_t operator()(const std::int64_t& a, const std::int64_t& b) const { return (a * 7 + b) % 1000003; }
};
//! The affine map t -> a*t + b on 32-bit unsigned integers (wrapping) and
//! composition: associative but not commutative, exact in any association,
//! so it checks that every order-keeping policy keeps rank order.
struct affine {
    std::uint32_t a, b;
    bool operator==(const affine&) const = default;
};
struct compose {
    static constexpr bool commutative = false;
    static constexpr const char* name = "compose";
    affine operator()(const affine& x, const affine& y) const { return {x.a * y.a, x.a * y.b + x.b}; }
};

// --- policies ------------------------------------------------------------------------

//! A policy value and the name the failure messages use.
struct named_policy {
    std::string name;
    chorus::policy pol;
};

template <class Algo>
named_policy named() {
    return {chorus::detail::policy_text(chorus::policy_of<Algo>), chorus::policy_of<Algo>};
}

//! True when every reduction of `p` folds each element left in rank order
//! 0..n-1 (so a non-associative operator such as shift_add gives the
//! serial reference): direct<>, two_shot<> and deterministic<>.
inline bool folds_left(const chorus::policy& p) {
    return p.deterministic || (!p.choose && (p.algo == chorus::algorithm::direct ||
                                             p.algo == chorus::algorithm::two_shot));
}

// --- counts --------------------------------------------------------------------------

inline std::vector<std::uint64_t> counts_for(int n) {
    return {0, 1, std::uint64_t(n) + 1, 97, 1009, 70001};
}

// --- the checkers (mpi_checks.hpp) -----------------------------------------------------
// Every rank checks its own result against a serial reference folded in
// rank order, bit for bit, at every count, out of place and in place, with
// buffers at a rank-dependent element offset.

//! AllReduce, ReduceScatter, and Reduce to the first and the last rank.
template <class T, class Op>
void check_reductions(comm_t& comm, const named_policy& p, const std::vector<std::uint64_t>& counts);

//! AllGather, and Broadcast from every rank (`every_root`) or from the
//! first and the last.
template <class T>
void check_copies(comm_t& comm, const named_policy& p, const std::vector<std::uint64_t>& counts, bool every_root);

//! AllToAll with blocks of 0, 1, 7 and 1003 elements.
template <class T>
void check_all_to_all(comm_t& comm, const named_policy& p);

//! AllGatherv with rank q giving counts[q] elements.
template <class T>
void check_all_gatherv(comm_t& comm, const named_policy& p, const std::vector<std::size_t>& counts);

//! ReduceScatterv with rank q receiving counts[q] elements.
template <class T, class Op>
void check_reduce_scatterv(comm_t& comm, const named_policy& p, const std::vector<std::size_t>& counts);

//! AllToAllv with counts[q * n + j] = what q sends j (zeros included),
//! scaled by `scale`; `symmetric`: a symmetric matrix, so the call also
//! runs in place.
template <class T>
void check_all_to_allv(comm_t& comm, const named_policy& p, std::uint64_t scale, bool symmetric);

//! A policy that reorders operands refuses the non-commutative Op: its
//! AllReduce, ReduceScatter and Reduce fail on every rank with
//! invalid_argument before anything moves, and the communicator carries on.
template <class T, class Op>
void check_refused(comm_t& comm, const named_policy& p);

//! Every collective of T with each of Ops, at counts_for(n), Broadcast from
//! every root.
template <class T, class... Ops>
void check_type(comm_t& comm, const named_policy& p) {
    const std::vector<std::uint64_t> counts = counts_for(comm.size());
    (check_reductions<T, Ops>(comm, p, counts), ...);
    check_copies<T>(comm, p, counts, true);
}

} // namespace mpi_test
