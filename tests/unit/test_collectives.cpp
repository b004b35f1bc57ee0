// Every collective against a serial reference, bit for bit:
//   collectives {all_reduce, all_gather, reduce_scatter, broadcast, reduce}
//   x algorithms {ring<>, ring<2 channels, 16-byte chunks>, ring<3, 64>}
//   x operators {sum, prod, min, max, avg, bit_and, bit_or, bit_xor, user}
//   x element types {int8..uint64, float, double, two user structs}
//   x counts {0, 1, n-1, n, n+1, a prime (97 or 1009)}, plus 2^20+7 for a few
//     (type, operator) pairs
//   x ranks {1, 2, 3, 4, 5, 8} x in-place / out-of-place
//   x buffers at element offsets 0..3 that differ between ranks, with guard
//     elements around every span (checked untouched), `in` checked unchanged
//     out of place, null spans for count 0.
//
// Each instantiation (collective x algorithm x type x operator) costs about a
// quarter of a second of compile time, so the cross product is covered, not
// multiplied out (see type_plan): every valid (type, operator) pair runs
// through all_reduce; every type runs reduce_scatter and reduce with avg and
// one more operator (all operators for int32 and float), every collective on
// ring<>, and every collective on one of the tuned rings. Run time is small:
// for each (type, ranks) one run_threads issues all of that type's calls
// (the same sequence on every rank).
//
// Inputs are small integers (or full-range bit patterns for bitwise/min/max
// on integers) so that every exact result is representable and independent
// of the order in which the ring combines the ranks' values.

#include "test_util.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace chorus_test;
using comm_t = chorus::communicator<chorus::threads>;

// --- user element types and operators -----------------------------------------

//! Arg-max: the larger value wins; ties go to the smaller index (commutative, associative).
struct indexed {
    float value;
    int index;
};
struct argmax_op {
    static constexpr bool commutative = true;
    indexed operator()(const indexed& a, const indexed& b) const {
        if (a.value != b.value) return a.value > b.value ? a : b;
        return a.index < b.index ? a : b;
    }
};

struct vec3 {
    float x, y, z;
};
struct vec3_add {
    static constexpr bool commutative = true;
    vec3 operator()(const vec3& a, const vec3& b) const { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
};

static_assert(sizeof(indexed) == 8 && sizeof(vec3) == 12, "no padding: results are compared bit for bit");

// --- algorithms ----------------------------------------------------------------

using ring_default = chorus::ring<>;
using ring_c2_16 = chorus::ring<{.channels = 2, .chunk_bytes = 16}>;
using ring_c3_64 = chorus::ring<{.channels = 3, .chunk_bytes = 64}>;
using ring_c2_64k = chorus::ring<{.channels = 2, .chunk_bytes = 64 << 10}>;

// --- names for messages ----------------------------------------------------------

template <class T>
const char* type_name() {
    if constexpr (std::is_same_v<T, indexed>) return "indexed{float,int}";
    else if constexpr (std::is_same_v<T, vec3>) return "vec3";
    else return chorus::element_traits<T>::name();
}
template <class Op>
const char* op_name() {
    if constexpr (std::is_same_v<Op, argmax_op>) return "argmax";
    else if constexpr (std::is_same_v<Op, vec3_add>) return "vec3_add";
    else return chorus::op_traits<Op>::name();
}

// --- operator lists ------------------------------------------------------------------

template <class... Ops>
struct op_list {
    static constexpr std::size_t size = sizeof...(Ops);
};

using all_integral_ops = op_list<chorus::sum, chorus::prod, chorus::min, chorus::max, chorus::avg, chorus::bit_and,
                                 chorus::bit_or, chorus::bit_xor>;
using all_float_ops = op_list<chorus::sum, chorus::prod, chorus::min, chorus::max, chorus::avg>;

//! What runs for element type T (every instantiation costs compile time, so
//! the cross product is covered, not multiplied out):
//!   all:  the operators run through all_reduce on ring<> (every valid one);
//!   rsr:  the operators run through reduce_scatter and reduce on ring<>;
//!   x, y: the operators of the tuned-ring calls: ring A runs all_reduce(x),
//!         reduce_scatter(y) and all_gather; ring B runs all_reduce(y),
//!         reduce(x) and broadcast;
//!   swap: false: A = ring<2ch,16B> (prime count 97), B = ring<3ch,64B> (1009);
//!         true: the other way round.
template <class T>
struct type_plan;
template <class All, class Rsr, class X, class Y, bool Swap>
struct plan_of {
    using all = All;
    using rsr = Rsr;
    using x = X;
    using y = Y;
    static constexpr bool swap = Swap;
};
// clang-format off
template <> struct type_plan<std::int8_t>   : plan_of<all_integral_ops, op_list<chorus::avg, chorus::prod>,    chorus::prod,    chorus::avg, false> {};
template <> struct type_plan<std::uint8_t>  : plan_of<all_integral_ops, op_list<chorus::avg, chorus::min>,     chorus::min,     chorus::avg, true> {};
template <> struct type_plan<std::int16_t>  : plan_of<all_integral_ops, op_list<chorus::avg, chorus::max>,     chorus::max,     chorus::avg, false> {};
template <> struct type_plan<std::uint16_t> : plan_of<all_integral_ops, op_list<chorus::avg, chorus::bit_and>, chorus::bit_and, chorus::avg, true> {};
template <> struct type_plan<std::int32_t>  : plan_of<all_integral_ops, all_integral_ops,                      chorus::bit_xor, chorus::avg, false> {};
template <> struct type_plan<std::uint32_t> : plan_of<all_integral_ops, op_list<chorus::avg, chorus::bit_or>,  chorus::bit_or,  chorus::avg, true> {};
template <> struct type_plan<std::int64_t>  : plan_of<all_integral_ops, op_list<chorus::avg, chorus::bit_xor>, chorus::bit_xor, chorus::avg, false> {};
template <> struct type_plan<std::uint64_t> : plan_of<all_integral_ops, op_list<chorus::avg, chorus::prod>,    chorus::prod,    chorus::avg, true> {};
template <> struct type_plan<float>         : plan_of<all_float_ops,    all_float_ops,                         chorus::min,     chorus::avg, false> {};
template <> struct type_plan<double>        : plan_of<all_float_ops,    op_list<chorus::avg, chorus::max>,     chorus::max,     chorus::avg, true> {};
template <> struct type_plan<indexed>       : plan_of<op_list<argmax_op>, op_list<argmax_op>,                   argmax_op,       argmax_op,   false> {};
template <> struct type_plan<vec3>          : plan_of<op_list<vec3_add>,  op_list<vec3_add>,                    vec3_add,        vec3_add,    true> {};
// clang-format on

template <class List, class F>
void for_each_op(F&& f) {
    [&]<class... Ops>(op_list<Ops...>) { (f(Ops{}), ...); }(List{});
}

// --- inputs and the serial reference ---------------------------------------------------

enum class pattern { general, prod, bits };

inline std::uint64_t mix(std::uint64_t x) { // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

template <class T, class Op>
constexpr pattern pattern_for() {
    if constexpr (std::is_same_v<Op, chorus::prod>) return pattern::prod;
    else if constexpr (std::is_integral_v<T> &&
                       (std::is_same_v<Op, chorus::bit_and> || std::is_same_v<Op, chorus::bit_or> ||
                        std::is_same_v<Op, chorus::bit_xor> || std::is_same_v<Op, chorus::min> ||
                        std::is_same_v<Op, chorus::max>))
        return pattern::bits; // the whole value range, every bit
    else return pattern::general;
}

//! Rank r's input element i.
template <class T>
T gen(pattern p, int r, std::size_t i) {
    const std::size_t g = (std::size_t(r) * 7 + i * 3) % 11;
    if constexpr (std::is_same_v<T, indexed>) {
        return {float(g), r};
    } else if constexpr (std::is_same_v<T, vec3>) {
        return {float(static_cast<long>(g) - 5), float(r), float(i % 13)};
    } else {
        if constexpr (std::is_integral_v<T>)
            if (p == pattern::bits) return static_cast<T>(mix(std::uint64_t(r) * 0x100000001b3ull + i));
        if (p == pattern::prod) {
            // At most two 2s among ranks 0..7 per element (r == -2i mod 4): products stay <= 4 in magnitude.
            T v = static_cast<T>((std::size_t(r) + 2 * i) % 4 == 0 ? 2 : 1);
            if constexpr (std::is_signed_v<T> || std::is_floating_point_v<T>)
                if ((std::size_t(r) * 5 + i) % 3 == 0) v = static_cast<T>(-v);
            return v;
        }
        if constexpr (std::is_unsigned_v<T>) return static_cast<T>(g);
        else return static_cast<T>(static_cast<long>(g) - 5);
    }
}

template <class T, class Op>
T ref_combine(const Op& op, const T& a, const T& b) {
    if constexpr (std::is_same_v<Op, chorus::sum> || std::is_same_v<Op, chorus::avg>) return static_cast<T>(a + b);
    else if constexpr (std::is_same_v<Op, chorus::prod>) return static_cast<T>(a * b);
    else if constexpr (std::is_same_v<Op, chorus::min>) return b < a ? b : a;
    else if constexpr (std::is_same_v<Op, chorus::max>) return a < b ? b : a;
    else if constexpr (std::is_same_v<Op, chorus::bit_and>) return static_cast<T>(a & b);
    else if constexpr (std::is_same_v<Op, chorus::bit_or>) return static_cast<T>(a | b);
    else if constexpr (std::is_same_v<Op, chorus::bit_xor>) return static_cast<T>(a ^ b);
    else return op(a, b); // user operator: its own definition is the reference
}

//! op over ranks 0..n-1 of element i, in rank order, then avg's division.
template <class T, class Op>
T reference(const Op& op, pattern p, int n, std::size_t i) {
    T acc = gen<T>(p, 0, i);
    for (int r = 1; r < n; ++r) acc = ref_combine(op, acc, gen<T>(p, r, i));
    if constexpr (std::is_same_v<Op, chorus::avg>) acc = static_cast<T>(acc / static_cast<T>(n));
    return acc;
}

// --- one case ------------------------------------------------------------------------------

struct ctx {
    comm_t& comm;
    failure_log& log;
    int n;
    int rank;
    std::uint64_t k = 0; //!< case number: the same sequence on every rank
    std::uint64_t failures = 0;
    //! Optional: a std::vector<T> holding reference<T>(op, p, n, i) for the
    //! current (T, op), computed once for all ranks (large counts).
    const void* shared_ref = nullptr;
};

//! The expected reduction of element i: from the shared table when there is one.
template <class T, class Op>
T expected_at(const ctx& x, const Op& op, pattern p, std::size_t i) {
    if (x.shared_ref != nullptr) return (*static_cast<const std::vector<T>*>(x.shared_ref))[i];
    return reference<T>(op, p, x.n, i);
}

//! Element offsets of this rank's buffers for case k: 0..3, different across ranks.
inline std::size_t off_in(const ctx& x, std::uint64_t k) { return (std::size_t(x.rank) + k) % 4; }
inline std::size_t off_out(const ctx& x, std::uint64_t k) { return (2 * std::size_t(x.rank) + k + 1) % 4; }

inline std::string describe(const ctx& x, const char* coll, const char* algo, const char* type, const char* op,
                            std::size_t count, bool in_place, std::size_t oi, std::size_t oo, int root = -1) {
    std::string s = std::string(coll) + "<" + algo + "> " + type + " " + op + " n=" + std::to_string(x.n) +
                    " rank=" + std::to_string(x.rank) + " count=" + std::to_string(count) +
                    (in_place ? " in-place" : " out-of-place") + " offsets(in=" + std::to_string(oi) +
                    ", out=" + std::to_string(oo) + ")";
    if (root >= 0) s += " root=" + std::to_string(root);
    return s;
}

inline void fail(ctx& x, const std::string& what) {
    ++x.failures;
    x.log.add(what);
}

//! Checks got[i] == expect(i) bit for bit; records the first mismatch.
template <class T, class Expect>
bool check_values(ctx& x, const std::string& d, const char* what, std::span<const T> got, Expect&& expect,
                  std::size_t from = 0, std::size_t to = std::size_t(-1)) {
    to = std::min(to, got.size());
    for (std::size_t i = from; i < to; ++i) {
        const T e = expect(i);
        if (!same_bits(got[i], e)) {
            fail(x, d + ": " + what + "[" + std::to_string(i) + "] is " + show(got[i]) + ", expected " + show(e));
            return false;
        }
    }
    return true;
}

template <class T>
void check_guards(ctx& x, const std::string& d, const char* what, const guarded<T>& g) {
    if (const long long b = g.first_bad_guard(); b >= 0)
        fail(x, d + ": a guard element of `" + what + "` was written (store index " + std::to_string(b) + ")");
}

template <class T>
void fill(guarded<T>& g, pattern p, int r) {
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = gen<T>(p, r, i);
}

//! Count 0 sometimes passes default-constructed (null) spans.
template <class T>
std::span<T> maybe_null(std::span<T> s, std::size_t count, std::uint64_t k) {
    return count == 0 && k % 3 == 0 ? std::span<T>() : s;
}

template <class Algo, class T, class Op>
void case_all_reduce(ctx& x, const char* algo, std::size_t c, bool in_place, Op op) {
    constexpr pattern p = pattern_for<T, Op>();
    const std::uint64_t k = x.k++;
    const std::size_t oi = off_in(x, k), oo = off_out(x, k);
    const std::string d = describe(x, "all_reduce", algo, type_name<T>(), op_name<Op>(), c, in_place, oi, oo);
    guarded<T> in(c, oi);
    fill(in, p, x.rank);
    auto expect = [&](std::size_t i) { return expected_at<T>(x, op, p, i); };
    if (in_place) {
        std::span<T> buf = maybe_null(in.span(), c, k);
        if (k % 2) chorus::all_reduce<Algo>(x.comm, buf, op);
        else chorus::all_reduce<Algo>(x.comm, std::span<const T>(buf), buf, op);
        check_values<T>(x, d, "buf", in.cspan(), expect);
        check_guards(x, d, "buf", in);
    } else {
        guarded<T> out(c, oo);
        chorus::all_reduce<Algo>(x.comm, maybe_null(in.cspan(), c, k), maybe_null(out.span(), c, k), op);
        check_values<T>(x, d, "out", out.cspan(), expect);
        check_guards(x, d, "out", out);
        check_values<T>(x, d, "in (must be unchanged)", in.cspan(), [&](std::size_t i) { return gen<T>(p, x.rank, i); });
        check_guards(x, d, "in", in);
    }
}

template <class Algo, class T>
void case_all_gather(ctx& x, const char* algo, std::size_t c, bool in_place) {
    constexpr pattern p = pattern::general;
    const std::uint64_t k = x.k++;
    const std::size_t oi = off_in(x, k), oo = off_out(x, k);
    const std::size_t n = std::size_t(x.n), me = std::size_t(x.rank);
    const std::string d = describe(x, "all_gather", algo, type_name<T>(), "-", c, in_place, in_place ? oo : oi, oo);
    guarded<T> out(n * c, oo);
    auto expect = [&](std::size_t i) { return gen<T>(p, int(i / c), i % c); };
    if (in_place) {
        for (std::size_t j = 0; j < c; ++j) out[me * c + j] = gen<T>(p, x.rank, j);
        std::span<T> o = maybe_null(out.span(), c, k);
        chorus::all_gather<Algo>(x.comm, std::span<const T>(o.subspan(me * c, c)), o);
        check_values<T>(x, d, "out", out.cspan(), expect);
        check_guards(x, d, "out", out);
    } else {
        guarded<T> in(c, oi);
        fill(in, p, x.rank);
        chorus::all_gather<Algo>(x.comm, maybe_null(in.cspan(), c, k), maybe_null(out.span(), c, k));
        check_values<T>(x, d, "out", out.cspan(), expect);
        check_guards(x, d, "out", out);
        check_values<T>(x, d, "in (must be unchanged)", in.cspan(), [&](std::size_t i) { return gen<T>(p, x.rank, i); });
        check_guards(x, d, "in", in);
    }
}

template <class Algo, class T, class Op>
void case_reduce_scatter(ctx& x, const char* algo, std::size_t c, bool in_place, Op op) {
    constexpr pattern p = pattern_for<T, Op>();
    const std::uint64_t k = x.k++;
    const std::size_t oi = off_in(x, k), oo = off_out(x, k);
    const std::size_t n = std::size_t(x.n), me = std::size_t(x.rank);
    const std::string d =
        describe(x, "reduce_scatter", algo, type_name<T>(), op_name<Op>(), c, in_place, oi, in_place ? oi : oo);
    guarded<T> in(n * c, oi);
    fill(in, p, x.rank);
    auto expect = [&](std::size_t j) { return expected_at<T>(x, op, p, me * c + j); };
    auto original = [&](std::size_t i) { return gen<T>(p, x.rank, i); };
    if (in_place) {
        std::span<T> i_ = maybe_null(in.span(), c, k);
        chorus::reduce_scatter<Algo>(x.comm, std::span<const T>(i_), i_.subspan(me * c, c), op);
        check_values<T>(x, d, "out (= block rank() of in)", in.cspan().subspan(me * c, c), expect);
        // The other blocks of an in-place input are only read.
        check_values<T>(x, d, "in outside block rank()", in.cspan(), original, 0, me * c);
        check_values<T>(x, d, "in outside block rank()", in.cspan(), original, me * c + c);
        check_guards(x, d, "in", in);
    } else {
        guarded<T> out(c, oo);
        chorus::reduce_scatter<Algo>(x.comm, maybe_null(in.cspan(), c, k), maybe_null(out.span(), c, k), op);
        check_values<T>(x, d, "out", out.cspan(), expect);
        check_guards(x, d, "out", out);
        check_values<T>(x, d, "in (must be unchanged)", in.cspan(), original);
        check_guards(x, d, "in", in);
    }
}

template <class Algo, class T>
void case_broadcast(ctx& x, const char* algo, std::size_t c) {
    constexpr pattern p = pattern::general;
    const std::uint64_t k = x.k++;
    const int root = int(k % std::uint64_t(x.n));
    const std::size_t oi = off_in(x, k);
    const std::string d = describe(x, "broadcast", algo, type_name<T>(), "-", c, true, oi, oi, root);
    guarded<T> buf(c, oi);
    fill(buf, p, x.rank); // differs from the root's values on every other rank
    chorus::broadcast<Algo>(x.comm, maybe_null(buf.span(), c, k), root);
    check_values<T>(x, d, "buf", buf.cspan(), [&](std::size_t i) { return gen<T>(p, root, i); });
    check_guards(x, d, "buf", buf);
}

template <class Algo, class T, class Op>
void case_reduce(ctx& x, const char* algo, std::size_t c, bool in_place, Op op) {
    constexpr pattern p = pattern_for<T, Op>();
    const std::uint64_t k = x.k++;
    const int root = int((k * 7 + 3) % std::uint64_t(x.n));
    const bool is_root = x.rank == root;
    const std::size_t oi = off_in(x, k), oo = off_out(x, k);
    const std::string d =
        describe(x, "reduce", algo, type_name<T>(), op_name<Op>(), c, in_place, oi, in_place ? oi : oo, root);
    guarded<T> in(c, oi);
    fill(in, p, x.rank);
    auto expect = [&](std::size_t i) { return expected_at<T>(x, op, p, i); };
    auto original = [&](std::size_t i) { return gen<T>(p, x.rank, i); };
    if (in_place) {
        // Non-roots pass either an empty `out` or `in` itself; both are ignored.
        std::span<T> out = is_root || k % 2 ? in.span() : std::span<T>();
        chorus::reduce<Algo>(x.comm, std::span<const T>(in.span()), out, op, root);
        if (is_root) check_values<T>(x, d, "buf at the root", in.cspan(), expect);
        else check_values<T>(x, d, "in at a non-root (must be unchanged)", in.cspan(), original);
        check_guards(x, d, "buf", in);
    } else {
        guarded<T> out(c, oo);
        std::span<T> o = is_root || k % 2 ? out.span() : std::span<T>();
        chorus::reduce<Algo>(x.comm, maybe_null(in.cspan(), c, k), maybe_null(o, c, k), op, root);
        if (is_root) {
            check_values<T>(x, d, "out at the root", out.cspan(), expect);
        } else {
            for (std::size_t i = 0; i < c; ++i)
                if (!out.untouched(i)) {
                    fail(x, d + ": a non-root's `out` was written at [" + std::to_string(i) + "]");
                    break;
                }
        }
        check_guards(x, d, "out", out);
        check_values<T>(x, d, "in (must be unchanged)", in.cspan(), original);
        check_guards(x, d, "in", in);
    }
}

// --- the matrix ------------------------------------------------------------------------------

inline std::vector<std::size_t> counts_for(int n, std::size_t extra) {
    std::vector<std::size_t> v{0, 1, std::size_t(n - 1), std::size_t(n), std::size_t(n + 1), extra};
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
}

//! Runs T's plan on n ranks (one run_threads, the same call sequence on
//! every rank); failures go to `log`. Returns the number of calls per rank.
template <class T>
std::uint64_t run_matrix(int n, failure_log& log) {
    using P = type_plan<T>;
    using tuned_a = std::conditional_t<P::swap, ring_c3_64, ring_c2_16>; // reduce_scatter, all_gather
    using tuned_b = std::conditional_t<P::swap, ring_c2_16, ring_c3_64>; // reduce, broadcast
    const char* name_a = P::swap ? "ring<3ch,64B>" : "ring<2ch,16B>";
    const char* name_b = P::swap ? "ring<2ch,16B>" : "ring<3ch,64B>";
    // 16-byte chunks mean many units per call: a smaller prime keeps them fast.
    const std::size_t extra_a = P::swap ? 1009 : 97, extra_b = P::swap ? 97 : 1009;
    std::atomic<std::uint64_t> ran{0};
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_timeout(std::chrono::seconds(60)); // a hang becomes an error, never a stuck test
        ctx x{comm, log, n, comm.rank()};
        // ring<>: every operator through all_reduce; the plan's through reduce_scatter and reduce.
        for_each_op<typename P::all>([&](auto op) {
            for (std::size_t c : counts_for(n, 1009))
                for (bool ip : {false, true}) case_all_reduce<ring_default, T>(x, "ring<>", c, ip, op);
        });
        for_each_op<typename P::rsr>([&](auto op) {
            for (std::size_t c : counts_for(n, 1009))
                for (bool ip : {false, true}) {
                    case_reduce_scatter<ring_default, T>(x, "ring<>", c, ip, op);
                    case_reduce<ring_default, T>(x, "ring<>", c, ip, op);
                }
        });
        for (std::size_t c : counts_for(n, 1009)) {
            for (bool ip : {false, true}) case_all_gather<ring_default, T>(x, "ring<>", c, ip);
            case_broadcast<ring_default, T>(x, "ring<>", c);
        }
        // Tuned rings: many chunks per channel, ragged chunk ends.
        typename P::x op_x{};
        typename P::y op_y{};
        for (std::size_t c : counts_for(n, extra_a))
            for (bool ip : {false, true}) {
                case_all_reduce<tuned_a, T>(x, name_a, c, ip, op_x);
                case_reduce_scatter<tuned_a, T>(x, name_a, c, ip, op_y);
                case_all_gather<tuned_a, T>(x, name_a, c, ip);
            }
        for (std::size_t c : counts_for(n, extra_b))
            for (bool ip : {false, true}) {
                case_all_reduce<tuned_b, T>(x, name_b, c, ip, op_y);
                case_reduce<tuned_b, T>(x, name_b, c, ip, op_x);
                if (!ip) case_broadcast<tuned_b, T>(x, name_b, c);
            }
        if (x.rank == 0) ran = x.k;
    });
    return ran.load();
}

} // namespace

TEST_CASE_TEMPLATE("collectives match a serial reference (ops x algorithms x counts x ranks x placement)", T,
                   std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, std::uint32_t,
                   std::int64_t, std::uint64_t, float, double, indexed, vec3) {
    failure_log log;
    std::uint64_t cases = 0;
    for (int n : {1, 2, 3, 4, 5, 8}) {
        INFO("ranks = " << n);
        try {
            cases += run_matrix<T>(n, log);
        } catch (const std::exception& e) {
            FAIL_CHECK("run_threads(" << n << ") threw: " << std::string(e.what()));
        }
    }
    MESSAGE(std::string(type_name<T>()) << ": " << cases << " collective calls per rank");
    log.report();
}

// --- large counts ---------------------------------------------------------------------------------

namespace {

#if CHORUS_TEST_TSAN
constexpr std::size_t big_count = 10007; // ThreadSanitizer: ~10x slower, keep it short
#else
constexpr std::size_t big_count = 1048583; // prime, just over 2^20: 8 MiB of doubles (the streaming-store path)
#endif

//! Large counts for one (type, operator): all_reduce on two algorithms, and
//! every other collective on ring<>; all-gather / reduce-scatter blocks are
//! big_count / n (odd) so the whole buffer stays around big_count elements.
template <class T, class Op>
void run_large(int n, failure_log& log) {
    const std::size_t block = (big_count / std::size_t(n)) | 1;
    std::vector<T> ref(std::max(big_count, block * std::size_t(n)));
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = reference<T>(Op{}, pattern_for<T, Op>(), n, i);
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_timeout(std::chrono::seconds(120));
        ctx x{comm, log, n, comm.rank()};
        x.shared_ref = &ref;
        x.k = std::uint64_t(n); // vary the offsets with n
        case_all_reduce<ring_default, T>(x, "ring<>", big_count, false, Op{});
        case_all_reduce<ring_c2_64k, T>(x, "ring<2ch,64KiB>", big_count, true, Op{});
        case_reduce_scatter<ring_default, T>(x, "ring<>", block, (n & 1) != 0, Op{});
        case_all_gather<ring_c2_64k, T>(x, "ring<2ch,64KiB>", block, (n & 1) == 0);
        case_broadcast<ring_default, T>(x, "ring<>", big_count);
        case_reduce<ring_c2_64k, T>(x, "ring<2ch,64KiB>", big_count, (n & 1) != 0, Op{});
    });
}

} // namespace

TEST_CASE("collectives with large counts match a serial reference") {
    // Each (type, operator) on a few rank counts only: every call moves
    // megabytes and the reference check reads them all.
    failure_log log;
    const auto t0 = steady::now();
    auto each = [&](std::initializer_list<int> ranks, auto&& run) {
        for (int n : ranks) {
            INFO("ranks = " << n);
            try {
                run(n);
            } catch (const std::exception& e) {
                FAIL_CHECK("run_threads(" << n << ") threw: " << std::string(e.what()));
            }
        }
    };
    each({1, 2, 3, 5, 8}, [&](int n) { run_large<float, chorus::sum>(n, log); });
    each({2, 3, 8}, [&](int n) { run_large<std::int32_t, chorus::max>(n, log); });
    each({1, 3, 5}, [&](int n) { run_large<double, chorus::avg>(n, log); });
    each({2, 5}, [&](int n) { run_large<indexed, argmax_op>(n, log); });
    each({3}, [&](int n) { run_large<vec3, vec3_add>(n, log); });
    MESSAGE("large counts (" << big_count << " elements): " << seconds_since(t0) << " s");
    log.report();
}

TEST_CASE("hierarchical<> on the threads backend (one node) runs its intra-node algorithm") {
    using hier = chorus::hierarchical<chorus::ring<{.channels = 2, .chunk_bytes = 64}>>;
    for (const int n : {1, 3, 4}) {
        CAPTURE(n);
        failure_log log;
        chorus::run_threads(n, [&](comm_t& comm) {
            const int r = comm.rank();
            constexpr std::size_t count = 1001;
            std::vector<float> in(count), out(count), all(count * std::size_t(n)), rs(count);
            for (std::size_t i = 0; i < count; ++i) in[i] = float(i % 7 + std::size_t(r));
            chorus::all_reduce<hier>(comm, std::span<const float>(in), std::span<float>(out));
            chorus::all_gather<hier>(comm, std::span<const float>(in), std::span<float>(all));
            for (std::size_t i = 0; i < count; ++i) {
                if (out[i] != float(n) * float(i % 7) + float(n * (n - 1) / 2)) log.add(std::string("all_reduce rank ") + std::to_string(r) + " element " + std::to_string(i));
                for (int q = 0; q < n; ++q)
                    if (all[std::size_t(q) * count + i] != float(i % 7 + std::size_t(q))) log.add(std::string("all_gather rank ") + std::to_string(r) + " element " + std::to_string(i));
            }
            chorus::reduce_scatter<hier>(comm, std::span<const float>(all), std::span<float>(rs));
            for (std::size_t i = 0; i < count; ++i)
                if (rs[i] != float(n) * all[std::size_t(r) * count + i]) log.add(std::string("reduce_scatter rank ") + std::to_string(r) + " element " + std::to_string(i));
            std::vector<float> b(in);
            chorus::broadcast<hier>(comm, std::span<float>(b), n - 1);
            for (std::size_t i = 0; i < count; ++i)
                if (b[i] != float(i % 7 + std::size_t(n - 1))) log.add(std::string("broadcast rank ") + std::to_string(r) + " element " + std::to_string(i));
        });
        log.report();
    }
}
