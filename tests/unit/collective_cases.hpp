#pragma once
//! The per-collective cases of the reference tests, shared by
//! test_collectives.cpp (ring matrix) and test_algorithms.cpp (every policy):
//! inputs, the serial reference, one checked call per case_* function.

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

//! The affine map t -> a*t + b on 32-bit unsigned integers (wrapping), and
//! composition: associative but not commutative, exact whatever the
//! association, so it checks that an order-preserving policy keeps rank
//! order.
struct affine {
    std::uint32_t a, b;
};
struct compose_op {
    static constexpr bool commutative = false;
    affine operator()(const affine& x, const affine& y) const {
        return {x.a * y.a, x.a * y.b + x.b};
    }
};

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
    else if constexpr (std::is_same_v<T, affine>) return "affine";
    else return chorus::element_traits<T>::name();
}
template <class Op>
const char* op_name() {
    if constexpr (std::is_same_v<Op, argmax_op>) return "argmax";
    else if constexpr (std::is_same_v<Op, vec3_add>) return "vec3_add";
    else if constexpr (std::is_same_v<Op, compose_op>) return "compose";
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
    } else if constexpr (std::is_same_v<T, affine>) {
        return {std::uint32_t(2 * g + 3), std::uint32_t(mix(std::uint64_t(r) * 131 + i))};
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

} // namespace
