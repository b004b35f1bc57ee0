#pragma once
// The definitions of the checkers declared in mpi_test_util.hpp, included
// only by the checks_*.cpp files that instantiate them. Every rank can
// compute every rank's input (a function of rank and index), so each rank
// checks its own result against a serial reference folded in rank order,
// bit for bit, without any communication. Inputs are small integers (or
// bit patterns for the bitwise operators and the affine maps), so exact
// results do not depend on the order in which an algorithm combines ranks.
// The calls go through chorus::detail::*_run with the policy as a value:
// one instantiation per (element type, operator) serves every policy.

#include "mpi_test_util.hpp"

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace mpi_test {

// --- inputs and references ---------------------------------------------------------

//! Rank r's element i for operator Op.
template <class T, class Op>
T input(int r, int n, std::uint64_t i) {
    if constexpr (std::is_same_v<T, vec3>) {
        return {float((i + r) % 5), float((i * 3 + r) % 7), float(r)};
    } else if constexpr (std::is_same_v<T, indexed>) {
        return {float((i * 13 + std::uint64_t(r) * 7) % 11), r};
    } else if constexpr (std::is_same_v<T, affine>) {
        const std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (std::uint64_t(r) + 1) * 0xC2B2AE3D27D4EB4Full;
        return {std::uint32_t(h >> 32) | 1u, std::uint32_t(h)};
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
    else if constexpr (std::is_same_v<T, affine>) return "affine";
    else return chorus::element_traits<T>::name();
}

//! Buffers start at an element offset that differs between ranks, so the
//! ranks' buffers are differently aligned.
inline std::size_t offset_of(const comm_t& comm) { return std::size_t(comm.rank() % 3); }

//! Per-rank block of AllGather / ReduceScatter for a test count: large
//! counts are divided among the ranks (the whole buffer stays ~count).
inline std::uint64_t block_of(std::uint64_t count, int n) {
    return count > 10000 ? count / std::uint64_t(n) + 1 : count;
}

// --- the classic collectives -----------------------------------------------------------

template <class T, class Op>
void check_reductions(comm_t& comm, const named_policy& p, const std::vector<std::uint64_t>& counts) {
    using chorus::detail::all_reduce_run;
    using chorus::detail::reduce_run;
    using chorus::detail::reduce_scatter_run;
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    const chorus::policy& pol = p.pol;
    const Op op{};
    const std::string algo_s = p.name, type_s = tname<T>(), op_s = chorus::op_traits<Op>::name();
    CAPTURE(algo_s);
    CAPTURE(type_s);
    CAPTURE(op_s);
    for (const std::uint64_t count : counts) {
        for (const bool in_place : {false, true}) {
            CAPTURE(count);
            CAPTURE(in_place);
            // AllReduce
            {
                std::vector<T> in(off + count), out(off + count);
                for (std::uint64_t i = 0; i < count; ++i) in[off + i] = input<T, Op>(r, n, i);
                if (in_place) {
                    all_reduce_run(comm, pol, std::span<const T>(in.data() + off, count),
                                   std::span<T>(in.data() + off, count), op, false);
                    out = in;
                } else {
                    all_reduce_run(comm, pol, std::span<const T>(in.data() + off, count),
                                   std::span<T>(out.data() + off, count), op, false);
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
                    reduce_scatter_run(comm, pol, std::span<const T>(base, count * n),
                                       std::span<T>(base + count * r, count), op, false);
                    for (std::uint64_t i = 0; i < count; ++i) out[off + i] = base[count * r + i];
                } else {
                    reduce_scatter_run(comm, pol, std::span<const T>(in.data() + off, count * n),
                                       std::span<T>(out.data() + off, count), op, false);
                }
                CHECK(first_wrong(out, off, count,
                                  [&](std::uint64_t i) { return reference<T, Op>(n, count * r + i); }) == "");
            }(block_of(count, n));
            // Reduce to the first and the last rank (in place: out == in on the root)
            for (int root = 0; root < n; root += (n > 2 ? n - 1 : 1)) {
                CAPTURE(root);
                std::vector<T> in(off + count), out(off + count);
                for (std::uint64_t i = 0; i < count; ++i) in[off + i] = input<T, Op>(r, n, i);
                const bool at_root = r == root;
                if (in_place && at_root) {
                    reduce_run(comm, pol, std::span<const T>(in.data() + off, count),
                               std::span<T>(in.data() + off, count), op, root, false);
                    out = in;
                } else {
                    reduce_run(comm, pol, std::span<const T>(in.data() + off, count),
                               at_root ? std::span<T>(out.data() + off, count) : std::span<T>(), op, root, false);
                }
                if (at_root)
                    CHECK(first_wrong(out, off, count, [&](std::uint64_t i) { return reference<T, Op>(n, i); }) == "");
            }
        }
    }
}

template <class T>
void check_copies(comm_t& comm, const named_policy& p, const std::vector<std::uint64_t>& counts, bool every_root) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    const chorus::policy& pol = p.pol;
    using Op = chorus::sum; // only picks the input pattern
    const std::string algo_s = p.name, type_s = tname<T>();
    CAPTURE(algo_s);
    CAPTURE(type_s);
    for (const std::uint64_t count : counts) {
        for (const bool in_place : {false, true}) {
            CAPTURE(count);
            CAPTURE(in_place);
            // AllGather: block q of out is rank q's input (large counts: blocks of count / n)
            [&](const std::uint64_t count) {
                std::vector<T> in(off + count), out(off + count * n);
                for (std::uint64_t i = 0; i < count; ++i) in[off + i] = input<T, Op>(r, n, i);
                if (in_place) {
                    T* base = out.data() + off;
                    for (std::uint64_t i = 0; i < count; ++i) base[count * r + i] = input<T, Op>(r, n, i);
                    chorus::detail::all_gather_run(comm, pol, std::span<const T>(base + count * r, count),
                                                   std::span<T>(base, count * n), false);
                } else {
                    chorus::detail::all_gather_run(comm, pol, std::span<const T>(in.data() + off, count),
                                                   std::span<T>(out.data() + off, count * n), false);
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
                chorus::detail::broadcast_run(comm, pol, std::span<T>(buf.data() + off, count), root, false);
                CHECK(first_wrong(buf, off, count, [&](std::uint64_t i) { return input<T, Op>(root, n, i); }) == "");
            }
        }
    }
}

template <class T, class Op>
void check_refused(comm_t& comm, const named_policy& p) {
    const int n = comm.size(), r = comm.rank();
    const std::uint64_t count = 7;
    const std::string algo_s = p.name, type_s = tname<T>(), op_s = chorus::op_traits<Op>::name();
    CAPTURE(algo_s);
    CAPTURE(type_s);
    CAPTURE(op_s);
    std::vector<T> in(count * std::uint64_t(n)), out(count * std::uint64_t(n));
    for (std::uint64_t i = 0; i < in.size(); ++i) in[i] = out[i] = input<T, Op>(r, n, i);
    const std::vector<T> before = out;
    auto refused = [&](const char* what, auto&& call) {
        CAPTURE(what);
        try {
            call();
            FAIL("a policy that reorders operands ran a non-commutative operator");
        } catch (const chorus::error& e) {
            CHECK(e.code() == chorus::errc::invalid_argument);
            CHECK(std::string(e.what()).find("reorders operands") != std::string::npos);
        }
    };
    const std::span<const T> in1(in.data(), count), in_n(in.data(), in.size());
    const std::span<T> out1(out.data(), count);
    refused("all_reduce", [&] { chorus::detail::all_reduce_run(comm, p.pol, in1, out1, Op{}, false); });
    refused("reduce_scatter", [&] { chorus::detail::reduce_scatter_run(comm, p.pol, in_n, out1, Op{}, false); });
    refused("reduce", [&] { chorus::detail::reduce_run(comm, p.pol, in1, out1, Op{}, 0, false); });
    CHECK(first_wrong(out, 0, out.size(), [&](std::uint64_t i) { return before[i]; }) == "");
    CHECK_FALSE(comm.broken());
}

// --- the exchange collectives ----------------------------------------------------------

//! Element i of what rank `from` sends rank `to` (all_to_all(v)).
template <class T>
T sent(int from, int to, std::uint64_t i) {
    return static_cast<T>((std::uint64_t(from) * 31 + std::uint64_t(to) * 7 + i * 3) % 101);
}

template <class T>
void check_all_to_all(comm_t& comm, const named_policy& p) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    const std::string algo_s = p.name, type_s = tname<T>();
    CAPTURE(algo_s);
    CAPTURE(type_s);
    for (const std::uint64_t block : {0ull, 1ull, 7ull, 1003ull}) {
        for (const bool in_place : {false, true}) {
            CAPTURE(block);
            CAPTURE(in_place);
            const std::uint64_t total = block * std::uint64_t(n);
            std::vector<T> in(off + total), out(off + total);
            for (int to = 0; to < n; ++to)
                for (std::uint64_t i = 0; i < block; ++i) in[off + std::uint64_t(to) * block + i] = sent<T>(r, to, i);
            if (in_place) {
                chorus::detail::all_to_all_run(comm, p.pol, std::span<const T>(in.data() + off, total),
                                               std::span<T>(in.data() + off, total), false);
                out = in;
            } else {
                chorus::detail::all_to_all_run(comm, p.pol, std::span<const T>(in.data() + off, total),
                                               std::span<T>(out.data() + off, total), false);
            }
            CHECK(first_wrong(out, off, total, [&](std::uint64_t i) {
                      return sent<T>(int(i / block), r, i % block);
                  }) == "");
        }
    }
}

template <class T>
void check_all_gatherv(comm_t& comm, const named_policy& p, const std::vector<std::size_t>& counts) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    std::vector<std::size_t> displ(std::size_t(n) + 1, 0);
    for (int q = 0; q < n; ++q) displ[std::size_t(q) + 1] = displ[std::size_t(q)] + counts[std::size_t(q)];
    const std::size_t total = displ[std::size_t(n)], mine = counts[std::size_t(r)];
    using Op = chorus::sum; // the input pattern
    const std::string algo_s = p.name, type_s = tname<T>();
    CAPTURE(algo_s);
    CAPTURE(type_s);
    for (const bool in_place : {false, true}) {
        CAPTURE(in_place);
        CAPTURE(total);
        std::vector<T> in(off + mine), out(off + total);
        T* block = in_place ? out.data() + off + displ[std::size_t(r)] : in.data() + off;
        for (std::size_t i = 0; i < mine; ++i) block[i] = input<T, Op>(r, n, i);
        chorus::detail::all_gatherv_run(comm, p.pol, std::span<const T>(block, mine),
                                        std::span<T>(out.data() + off, total), std::span<const std::size_t>(counts),
                                        false);
        std::string wrong;
        for (int q = 0; q < n && wrong.empty(); ++q)
            for (std::size_t i = 0; i < counts[std::size_t(q)] && wrong.empty(); ++i)
                if (!same_bits(out[off + displ[std::size_t(q)] + i], input<T, Op>(q, n, i)))
                    wrong = "block " + std::to_string(q) + " element " + std::to_string(i);
        CHECK(wrong == "");
    }
}

template <class T, class Op>
void check_reduce_scatterv(comm_t& comm, const named_policy& p, const std::vector<std::size_t>& counts) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    std::size_t total = 0, displ = 0;
    for (int q = 0; q < n; ++q) {
        if (q == r) displ = total;
        total += counts[std::size_t(q)];
    }
    const std::size_t mine = counts[std::size_t(r)];
    const std::string algo_s = p.name, type_s = tname<T>(), op_s = chorus::op_traits<Op>::name();
    CAPTURE(algo_s);
    CAPTURE(type_s);
    CAPTURE(op_s);
    for (const bool in_place : {false, true}) {
        CAPTURE(in_place);
        std::vector<T> in(off + total), out(off + mine);
        for (std::size_t i = 0; i < total; ++i) in[off + i] = input<T, Op>(r, n, i);
        T* dst = in_place ? in.data() + off + displ : out.data() + off;
        chorus::detail::reduce_scatterv_run(comm, p.pol, std::span<const T>(in.data() + off, total),
                                            std::span<T>(dst, mine), std::span<const std::size_t>(counts), Op{},
                                            false);
        std::string wrong;
        for (std::size_t i = 0; i < mine && wrong.empty(); ++i)
            if (!same_bits(dst[i], reference<T, Op>(n, displ + i))) wrong = "element " + std::to_string(i);
        CHECK(wrong == "");
    }
}

template <class T>
void check_all_to_allv(comm_t& comm, const named_policy& p, std::uint64_t scale, bool symmetric) {
    const int n = comm.size(), r = comm.rank();
    const std::size_t off = offset_of(comm);
    const std::size_t N = std::size_t(n), R = std::size_t(r);
    std::vector<std::size_t> counts(N * N);
    for (std::size_t q = 0; q < N; ++q)
        for (std::size_t j = 0; j < N; ++j)
            counts[q * N + j] = (symmetric ? (q + j + 1) % 5 : (q * 3 + j * 5 + 1) % 7) * scale;
    std::size_t in_total = 0, out_total = 0;
    for (std::size_t j = 0; j < N; ++j) in_total += counts[R * N + j];
    for (std::size_t q = 0; q < N; ++q) out_total += counts[q * N + R];
    const std::string algo_s = p.name, type_s = tname<T>();
    CAPTURE(algo_s);
    CAPTURE(type_s);
    for (const bool in_place : {false, true}) {
        if (in_place && !symmetric) continue;
        CAPTURE(in_place);
        CAPTURE(scale);
        std::vector<T> in(off + in_total), out(off + out_total);
        std::size_t pos = 0;
        for (std::size_t j = 0; j < N; ++j)
            for (std::size_t i = 0; i < counts[R * N + j]; ++i) in[off + pos++] = sent<T>(r, int(j), i);
        T* dst = in_place ? in.data() + off : out.data() + off;
        chorus::detail::all_to_allv_run(comm, p.pol, std::span<const T>(in.data() + off, in_total),
                                        std::span<T>(dst, out_total), std::span<const std::size_t>(counts), false);
        std::string wrong;
        pos = 0;
        for (std::size_t q = 0; q < N && wrong.empty(); ++q)
            for (std::size_t i = 0; i < counts[q * N + R] && wrong.empty(); ++i)
                if (!same_bits(dst[pos++], sent<T>(int(q), r, i)))
                    wrong = "from rank " + std::to_string(q) + " element " + std::to_string(i);
        CHECK(wrong == "");
    }
}

} // namespace mpi_test

// Explicit instantiations (in the checks_*.cpp files, inside namespace mpi_test).
#define MPI_TEST_REDUCTIONS(T, Op)                                                                                    \
    template void check_reductions<T, Op>(comm_t&, const named_policy&, const std::vector<std::uint64_t>&)
#define MPI_TEST_COPIES(T)                                                                                            \
    template void check_copies<T>(comm_t&, const named_policy&, const std::vector<std::uint64_t>&, bool)
#define MPI_TEST_REFUSED(T, Op) template void check_refused<T, Op>(comm_t&, const named_policy&)
#define MPI_TEST_ALL_TO_ALL(T) template void check_all_to_all<T>(comm_t&, const named_policy&)
#define MPI_TEST_ALL_GATHERV(T)                                                                                       \
    template void check_all_gatherv<T>(comm_t&, const named_policy&, const std::vector<std::size_t>&)
#define MPI_TEST_REDUCE_SCATTERV(T, Op)                                                                               \
    template void check_reduce_scatterv<T, Op>(comm_t&, const named_policy&, const std::vector<std::size_t>&)
#define MPI_TEST_ALL_TO_ALLV(T) template void check_all_to_allv<T>(comm_t&, const named_policy&, std::uint64_t, bool)
