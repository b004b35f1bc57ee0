#pragma once
// What the MPI tests share: the world communicator, inputs every rank can
// compute for every rank (a function of rank and index), serial references
// folded in rank order, and checkers of the five classic collectives that
// compare bit for bit. Inputs are small integers (or bit patterns for the
// bitwise operators), so exact results do not depend on the order in which
// an algorithm combines ranks.

#include <doctest/doctest.h>

#include <chorus/mpi.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace mpi_test {

using comm_t = chorus::communicator<chorus::mpi>;

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
    indexed operator()(const indexed& a, const indexed& b) const {
        if (a.value != b.value) return a.value > b.value ? a : b;
        return a.index < b.index ? a : b;
    }
};

// --- inputs and references ---------------------------------------------------------

//! Rank r's element i for operator Op.
template <class T, class Op>
T input(int r, int n, std::uint64_t i) {
    if constexpr (std::is_same_v<T, vec3>) {
        return {float((i + r) % 5), float((i * 3 + r) % 7), float(r)};
    } else if constexpr (std::is_same_v<T, indexed>) {
        return {float((i * 13 + std::uint64_t(r) * 7) % 11), r};
    } else if constexpr (std::is_same_v<Op, chorus::bit_and> || std::is_same_v<Op, chorus::bit_or> ||
                         std::is_same_v<Op, chorus::bit_xor>) {
        const std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (std::uint64_t(r) + 1) * 0xC2B2AE3D27D4EB4Full;
        return static_cast<T>(h >> 17);
    } else if constexpr (std::is_same_v<Op, chorus::prod>) {
        return static_cast<T>((i + std::uint64_t(r)) % 4 == 0 ? 2 : 1); // product <= 2^(n/4 + 1)
    } else if constexpr (std::is_same_v<Op, chorus::avg>) {
        // pairs c + k, c - k (c alone on an odd last rank): the sum is n * c exactly
        const int c = 3 + int(i % 5), k = 1 + int(i % 3);
        if (n % 2 == 1 && r == n - 1) return static_cast<T>(c);
        return static_cast<T>(r % 2 == 0 ? c + k : c - k);
    } else {
        return static_cast<T>(1 + (i * 7 + std::uint64_t(r) * 3) % 5);
    }
}

template <class T, class Op>
T reference(int n, std::uint64_t i) {
    const Op op{};
    T acc = input<T, Op>(0, n, i);
    for (int r = 1; r < n; ++r) acc = op(acc, input<T, Op>(r, n, i));
    return chorus::detail::finish(op, acc, n);
}

template <class T>
bool same_bits(const T& a, const T& b) {
    return std::memcmp(&a, &b, sizeof(T)) == 0;
}

//! First wrong element of `got` against want(i), as text ("" when all right).
template <class T, class F>
std::string first_wrong(const std::vector<T>& got, std::size_t off, std::uint64_t count, F&& want) {
    for (std::uint64_t i = 0; i < count; ++i)
        if (!same_bits(got[off + i], want(i))) return "element " + std::to_string(i) + " of " + std::to_string(count);
    return {};
}

template <class T>
const char* tname() {
    if constexpr (std::is_same_v<T, vec3>) return "vec3";
    else if constexpr (std::is_same_v<T, indexed>) return "indexed";
    else return chorus::element_traits<T>::name();
}

//! Buffers start at an element offset that differs between ranks, so the
//! ranks' buffers are differently aligned.
inline std::size_t offset_of(const comm_t& comm) { return std::size_t(comm.rank() % 3); }

inline std::vector<std::uint64_t> counts_for(int n) {
    return {0, 1, std::uint64_t(n) + 1, 97, 1009, 70001};
}

//! Per-rank block of AllGather / ReduceScatter for a test count: large
//! counts are divided among the ranks (the whole buffer stays ~count).
inline std::uint64_t block_of(std::uint64_t count, int n) {
    return count > 10000 ? count / std::uint64_t(n) + 1 : count;
}

// --- the collectives -----------------------------------------------------------------

template <class Algo, class T, class Op>
void check_reductions(comm_t& comm, const char* algo, const std::vector<std::uint64_t>& counts) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    for (const std::uint64_t count : counts) {
        for (const bool in_place : {false, true}) {
            const std::string algo_s = algo, type_s = tname<T>();
            CAPTURE(algo_s);
            CAPTURE(type_s);
            const std::string op_s = chorus::op_traits<Op>::name();
            CAPTURE(op_s);
            CAPTURE(count);
            CAPTURE(in_place);
            // AllReduce
            {
                std::vector<T> in(off + count), out(off + count);
                for (std::uint64_t i = 0; i < count; ++i) in[off + i] = input<T, Op>(r, n, i);
                if (in_place) {
                    chorus::all_reduce<Algo>(comm, std::span<T>(in.data() + off, count), Op{});
                    out = in;
                } else {
                    chorus::all_reduce<Algo>(comm, std::span<const T>(in.data() + off, count),
                                             std::span<T>(out.data() + off, count), Op{});
                    CHECK(first_wrong(in, off, count, [&](std::uint64_t i) { return input<T, Op>(r, n, i); }) == "");
                }
                CHECK(first_wrong(out, off, count, [&](std::uint64_t i) { return reference<T, Op>(n, i); }) == "");
            }
            // ReduceScatter: block r of the reduction of everyone's n * count inputs
            // (large counts: blocks of count / n, so the input stays ~count)
            [&](const std::uint64_t count) {
                std::vector<T> in(off + count * n), out(off + count);
                for (std::uint64_t i = 0; i < count * n; ++i) in[off + i] = input<T, Op>(r, n, i);
                if (in_place) {
                    T* base = in.data() + off;
                    chorus::reduce_scatter<Algo>(comm, std::span<const T>(base, count * n),
                                                 std::span<T>(base + count * r, count), Op{});
                    for (std::uint64_t i = 0; i < count; ++i) out[off + i] = base[count * r + i];
                } else {
                    chorus::reduce_scatter<Algo>(comm, std::span<const T>(in.data() + off, count * n),
                                                 std::span<T>(out.data() + off, count), Op{});
                }
                CHECK(first_wrong(out, off, count,
                                  [&](std::uint64_t i) { return reference<T, Op>(n, count * r + i); }) == "");
            }(block_of(count, n));
            // Reduce to every root in turn (in place: out == in on the root)
            for (int root = 0; root < n; root += (n > 2 ? n - 1 : 1)) {
                CAPTURE(root);
                std::vector<T> in(off + count), out(off + count);
                for (std::uint64_t i = 0; i < count; ++i) in[off + i] = input<T, Op>(r, n, i);
                const bool at_root = r == root;
                if (in_place && at_root) {
                    chorus::reduce<Algo>(comm, std::span<const T>(in.data() + off, count),
                                         std::span<T>(in.data() + off, count), Op{}, root);
                    out = in;
                } else {
                    chorus::reduce<Algo>(comm, std::span<const T>(in.data() + off, count),
                                         at_root ? std::span<T>(out.data() + off, count) : std::span<T>(), Op{}, root);
                }
                if (at_root)
                    CHECK(first_wrong(out, off, count, [&](std::uint64_t i) { return reference<T, Op>(n, i); }) == "");
            }
        }
    }
}

//! `every_root`: Broadcast from every rank in turn, else from 0 and n-1.
template <class Algo, class T>
void check_copies(comm_t& comm, const char* algo, const std::vector<std::uint64_t>& counts, bool every_root) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    using Op = chorus::sum; // only picks the input pattern
    for (const std::uint64_t count : counts) {
        for (const bool in_place : {false, true}) {
            const std::string algo_s = algo, type_s = tname<T>();
            CAPTURE(algo_s);
            CAPTURE(type_s);
            CAPTURE(count);
            CAPTURE(in_place);
            // AllGather: block q of out is rank q's input (large counts: blocks of count / n)
            [&](const std::uint64_t count) {
                std::vector<T> in(off + count), out(off + count * n);
                for (std::uint64_t i = 0; i < count; ++i) in[off + i] = input<T, Op>(r, n, i);
                if (in_place) {
                    T* base = out.data() + off;
                    for (std::uint64_t i = 0; i < count; ++i) base[count * r + i] = input<T, Op>(r, n, i);
                    chorus::all_gather<Algo>(comm, std::span<const T>(base + count * r, count),
                                             std::span<T>(base, count * n));
                } else {
                    chorus::all_gather<Algo>(comm, std::span<const T>(in.data() + off, count),
                                             std::span<T>(out.data() + off, count * n));
                }
                CHECK(first_wrong(out, off, count * n, [&](std::uint64_t i) {
                          return input<T, Op>(int(i / (count ? count : 1)), n, i % (count ? count : 1));
                      }) == "");
            }(block_of(count, n));
            // Broadcast from every root in turn (or the first and the last)
            for (int root = 0; root < n; root += every_root || n <= 2 ? 1 : n - 1) {
                CAPTURE(root);
                std::vector<T> buf(off + count);
                for (std::uint64_t i = 0; i < count; ++i) buf[off + i] = input<T, Op>(r, n, i);
                chorus::broadcast<Algo>(comm, std::span<T>(buf.data() + off, count), root);
                CHECK(first_wrong(buf, off, count, [&](std::uint64_t i) { return input<T, Op>(root, n, i); }) == "");
            }
        }
    }
}

template <class Algo, class T, class... Ops>
void check_type(comm_t& comm, const char* algo) {
    const std::vector<std::uint64_t> counts = counts_for(comm.size());
    (check_reductions<Algo, T, Ops>(comm, algo, counts), ...);
    check_copies<Algo, T>(comm, algo, counts, true);
}

inline comm_t& world() {
    // CHORUS_TIMEOUT_MS (set by CTest) bounds every wait.
    static comm_t comm(MPI_COMM_WORLD);
    return comm;
}


} // namespace mpi_test
