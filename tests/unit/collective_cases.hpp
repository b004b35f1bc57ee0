#pragma once
//! The per-collective cases of the reference tests, shared by
//! test_collectives.cpp (element types x operators) and test_policies.cpp
//! (every policy): inputs, the serial reference, one checked call per
//! case_* function. A case takes the policy as a value (run time), so each
//! case function is instantiated once per (element type, operator) and
//! serves every policy: the calls go through chorus::detail::*_run, what
//! the public chorus::all_reduce<Algo>(...) etc. run with policy_of<Algo>.

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

// --- policies ------------------------------------------------------------------

inline const named_policy ring_default{"ring<>", chorus::policy_of<chorus::ring<>>};
inline const named_policy ring_c2_16{"ring<2ch,16B>", chorus::policy::fixed(chorus::algorithm::ring, {2, 16})};
inline const named_policy ring_c3_64{"ring<3ch,64B>", chorus::policy::fixed(chorus::algorithm::ring, {3, 64})};

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

// --- one (element type, operator), erased ---------------------------------------------------

//! What the case functions below need of one (element type, operator): the
//! inputs, the serial reference, printing, and the calls themselves (the
//! only typed code: chorus::detail::*_run with T and Op). The case
//! functions are compiled once, not once per (type, operator).
struct typed {
    std::size_t elem = 1;
    const char* type = "";
    const char* op = "";
    //! Elements [first, first + n) of rank r's input (gen with the pair's pattern, or `general`).
    void (*input)(unsigned char* dst, int r, std::size_t first, std::size_t n, bool general) = nullptr;
    //! The reduction over ranks 0..nranks-1 of elements [first, first + n) (reference()).
    void (*reduced)(unsigned char* dst, int nranks, std::size_t first, std::size_t n) = nullptr;
    std::string (*show)(const unsigned char* v) = nullptr;
    // The calls (sync), on raw element pointers; spans may be null with count 0.
    void (*all_reduce)(comm_t&, const chorus::policy&, const unsigned char* in, unsigned char* out,
                       std::size_t n) = nullptr;
    void (*reduce_scatter)(comm_t&, const chorus::policy&, const unsigned char* in, std::size_t in_n,
                           unsigned char* out, std::size_t out_n) = nullptr;
    void (*reduce)(comm_t&, const chorus::policy&, const unsigned char* in, std::size_t in_n, unsigned char* out,
                   std::size_t out_n, int root) = nullptr;
    void (*all_gather)(comm_t&, const chorus::policy&, const unsigned char* in, std::size_t in_n,
                       unsigned char* out, std::size_t out_n) = nullptr;
    void (*broadcast)(comm_t&, const chorus::policy&, unsigned char* buf, std::size_t n, int root) = nullptr;
};

template <class T, class Op>
const typed& typed_of() {
    static const typed t = [] {
        typed y;
        y.elem = sizeof(T);
        y.type = type_name<T>();
        y.op = op_name<Op>();
        y.input = [](unsigned char* dst, int r, std::size_t first, std::size_t n, bool general) {
            const pattern p = general ? pattern::general : pattern_for<T, Op>();
            for (std::size_t i = 0; i < n; ++i) {
                const T v = gen<T>(p, r, first + i);
                std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
            }
        };
        y.reduced = [](unsigned char* dst, int nranks, std::size_t first, std::size_t n) {
            for (std::size_t i = 0; i < n; ++i) {
                const T v = reference<T>(Op{}, pattern_for<T, Op>(), nranks, first + i);
                std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
            }
        };
        y.show = [](const unsigned char* v) {
            T x;
            std::memcpy(static_cast<void*>(&x), v, sizeof(T));
            return show(x);
        };
        if constexpr (!std::is_same_v<Op, chorus::detail::copy_only>) {
            y.all_reduce = [](comm_t& c, const chorus::policy& pol, const unsigned char* in, unsigned char* out,
                              std::size_t n) {
                chorus::detail::all_reduce_run(c, pol, std::span<const T>(reinterpret_cast<const T*>(in), n),
                                               std::span<T>(reinterpret_cast<T*>(out), n), Op{}, false);
            };
            y.reduce_scatter = [](comm_t& c, const chorus::policy& pol, const unsigned char* in, std::size_t in_n,
                                  unsigned char* out, std::size_t out_n) {
                chorus::detail::reduce_scatter_run(c, pol, std::span<const T>(reinterpret_cast<const T*>(in), in_n),
                                                   std::span<T>(reinterpret_cast<T*>(out), out_n), Op{}, false);
            };
            y.reduce = [](comm_t& c, const chorus::policy& pol, const unsigned char* in, std::size_t in_n,
                          unsigned char* out, std::size_t out_n, int root) {
                chorus::detail::reduce_run(c, pol, std::span<const T>(reinterpret_cast<const T*>(in), in_n),
                                           std::span<T>(reinterpret_cast<T*>(out), out_n), Op{}, root, false);
            };
        } else {
            y.all_gather = [](comm_t& c, const chorus::policy& pol, const unsigned char* in, std::size_t in_n,
                              unsigned char* out, std::size_t out_n) {
                chorus::detail::all_gather_run(c, pol, std::span<const T>(reinterpret_cast<const T*>(in), in_n),
                                               std::span<T>(reinterpret_cast<T*>(out), out_n), false);
            };
            y.broadcast = [](comm_t& c, const chorus::policy& pol, unsigned char* buf, std::size_t n, int root) {
                chorus::detail::broadcast_run(c, pol, std::span<T>(reinterpret_cast<T*>(buf), n), root, false);
            };
        }
        return y;
    }();
    return t;
}

// --- one case ------------------------------------------------------------------------------

struct ctx {
    comm_t& comm;
    failure_log& log;
    int n;
    int rank;
    std::uint64_t k = 0; //!< case number: the same sequence on every rank
    std::uint64_t failures = 0;
    //! Optional: the elements of reference(op, p, n, i) for the current
    //! (type, operator), computed once for all ranks (large counts).
    const unsigned char* shared_ref = nullptr;
};

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

//! `len` elements of `elem` bytes at element offset `off` of a store with
//! `guard` guard elements after them; every byte starts as `fill`.
class guarded_bytes {
public:
    static constexpr unsigned char fill = guarded<unsigned char>::default_fill;
    static constexpr std::size_t guard = 3;

    guarded_bytes(std::size_t elem, std::size_t len, std::size_t off)
        : store_((off + len + guard) * elem + 16, fill), elem_(elem), off_(off), len_(len) {}
    //! The span's first element (the store starts 16-byte aligned, so the offset sets the phase).
    unsigned char* data() { return base() + off_ * elem_; }
    unsigned char* at(std::size_t i) { return data() + i * elem_; }
    std::size_t size() const { return len_; }
    //! Index (in elements of the whole store) of the first clobbered guard byte's element, or -1.
    long long first_bad_guard() {
        const unsigned char* b = base();
        const std::size_t lo = off_ * elem_, hi = (off_ + len_) * elem_, all = (off_ + len_ + guard) * elem_;
        for (std::size_t i = 0; i < lo; ++i)
            if (b[i] != fill) return static_cast<long long>(i / elem_);
        for (std::size_t i = hi; i < all; ++i)
            if (b[i] != fill) return static_cast<long long>(i / elem_);
        return -1;
    }
    //! True when element i of the span still holds the fill pattern.
    bool untouched(std::size_t i) {
        for (std::size_t j = 0; j < elem_; ++j)
            if (at(i)[j] != fill) return false;
        return true;
    }

private:
    unsigned char* base() {
        const auto p = reinterpret_cast<std::uintptr_t>(store_.data());
        return store_.data() + (16 - p % 16) % 16;
    }
    std::vector<unsigned char> store_;
    std::size_t elem_, off_, len_;
};

//! Checks elements [from, to) of `got` against `want` (both n elements)
//! bit for bit; records the first mismatch.
inline bool check_values(ctx& x, const typed& t, const std::string& d, const char* what, const unsigned char* got,
                         const unsigned char* want, std::size_t n, std::size_t from = 0,
                         std::size_t to = std::size_t(-1)) {
    to = std::min(to, n);
    for (std::size_t i = from; i < to; ++i)
        if (std::memcmp(got + i * t.elem, want + i * t.elem, t.elem) != 0) {
            fail(x, d + ": " + what + "[" + std::to_string(i) + "] is " + t.show(got + i * t.elem) + ", expected " +
                        t.show(want + i * t.elem));
            return false;
        }
    return true;
}

inline void check_guards(ctx& x, const std::string& d, const char* what, guarded_bytes& g) {
    if (const long long b = g.first_bad_guard(); b >= 0)
        fail(x, d + ": a guard element of `" + what + "` was written (store index " + std::to_string(b) + ")");
}

//! Rank r's input (elements [first, first + n)) as a vector of bytes.
inline std::vector<unsigned char> input_of(const typed& t, int r, std::size_t first, std::size_t n,
                                           bool general = false) {
    std::vector<unsigned char> v(n * t.elem);
    t.input(v.data(), r, first, n, general);
    return v;
}

//! The reduction of elements [first, first + n): from the shared table when there is one.
inline std::vector<unsigned char> reduced_of(const ctx& x, const typed& t, std::size_t first, std::size_t n) {
    std::vector<unsigned char> v(n * t.elem);
    if (x.shared_ref != nullptr) {
        if (n != 0) std::memcpy(v.data(), x.shared_ref + first * t.elem, n * t.elem);
    } else {
        t.reduced(v.data(), x.n, first, n);
    }
    return v;
}

//! Count 0 sometimes passes default-constructed (null) spans.
inline unsigned char* maybe_null(unsigned char* p, std::size_t count, std::uint64_t k) {
    return count == 0 && k % 3 == 0 ? nullptr : p;
}

inline void case_all_reduce(ctx& x, const named_policy& algo, const typed& t, std::size_t c, bool in_place) {
    const std::uint64_t k = x.k++;
    const std::size_t oi = off_in(x, k), oo = off_out(x, k);
    const std::string d = describe(x, "all_reduce", algo.name, t.type, t.op, c, in_place, oi, oo);
    guarded_bytes in(t.elem, c, oi);
    const std::vector<unsigned char> mine = input_of(t, x.rank, 0, c), want = reduced_of(x, t, 0, c);
    if (c != 0) std::memcpy(in.data(), mine.data(), mine.size());
    if (in_place) {
        unsigned char* buf = maybe_null(in.data(), c, k);
        t.all_reduce(x.comm, algo.pol, buf, buf, c);
        check_values(x, t, d, "buf", in.data(), want.data(), c);
        check_guards(x, d, "buf", in);
    } else {
        guarded_bytes out(t.elem, c, oo);
        t.all_reduce(x.comm, algo.pol, maybe_null(in.data(), c, k), maybe_null(out.data(), c, k), c);
        check_values(x, t, d, "out", out.data(), want.data(), c);
        check_guards(x, d, "out", out);
        check_values(x, t, d, "in (must be unchanged)", in.data(), mine.data(), c);
        check_guards(x, d, "in", in);
    }
}

//! `t` is a copy-only entry (typed_of<T, copy_only>): only the input pattern `general` is used.
inline void case_all_gather(ctx& x, const named_policy& algo, const typed& t, std::size_t c, bool in_place) {
    const std::uint64_t k = x.k++;
    const std::size_t oi = off_in(x, k), oo = off_out(x, k);
    const std::size_t n = std::size_t(x.n), me = std::size_t(x.rank);
    const std::string d = describe(x, "all_gather", algo.name, t.type, "-", c, in_place, in_place ? oo : oi, oo);
    guarded_bytes out(t.elem, n * c, oo);
    std::vector<unsigned char> want(n * c * t.elem);
    for (std::size_t q = 0; q < n; ++q) t.input(want.data() + q * c * t.elem, int(q), 0, c, true);
    const std::vector<unsigned char> mine = input_of(t, x.rank, 0, c, true);
    if (in_place) {
        if (c != 0) std::memcpy(out.at(me * c), mine.data(), mine.size());
        unsigned char* o = maybe_null(out.data(), c, k);
        t.all_gather(x.comm, algo.pol, o == nullptr ? nullptr : o + me * c * t.elem, c, o, n * c);
        check_values(x, t, d, "out", out.data(), want.data(), n * c);
        check_guards(x, d, "out", out);
    } else {
        guarded_bytes in(t.elem, c, oi);
        if (c != 0) std::memcpy(in.data(), mine.data(), mine.size());
        t.all_gather(x.comm, algo.pol, maybe_null(in.data(), c, k), c, maybe_null(out.data(), c, k), n * c);
        check_values(x, t, d, "out", out.data(), want.data(), n * c);
        check_guards(x, d, "out", out);
        check_values(x, t, d, "in (must be unchanged)", in.data(), mine.data(), c);
        check_guards(x, d, "in", in);
    }
}

inline void case_reduce_scatter(ctx& x, const named_policy& algo, const typed& t, std::size_t c, bool in_place) {
    const std::uint64_t k = x.k++;
    const std::size_t oi = off_in(x, k), oo = off_out(x, k);
    const std::size_t n = std::size_t(x.n), me = std::size_t(x.rank);
    const std::string d = describe(x, "reduce_scatter", algo.name, t.type, t.op, c, in_place, oi, in_place ? oi : oo);
    guarded_bytes in(t.elem, n * c, oi);
    const std::vector<unsigned char> mine = input_of(t, x.rank, 0, n * c), want = reduced_of(x, t, me * c, c);
    if (n * c != 0) std::memcpy(in.data(), mine.data(), mine.size());
    if (in_place) {
        unsigned char* i_ = maybe_null(in.data(), c, k);
        t.reduce_scatter(x.comm, algo.pol, i_, n * c, i_ == nullptr ? nullptr : i_ + me * c * t.elem, c);
        check_values(x, t, d, "out (= block rank() of in)", in.at(me * c), want.data(), c);
        // The other blocks of an in-place input are only read.
        check_values(x, t, d, "in outside block rank()", in.data(), mine.data(), n * c, 0, me * c);
        check_values(x, t, d, "in outside block rank()", in.data(), mine.data(), n * c, me * c + c);
        check_guards(x, d, "in", in);
    } else {
        guarded_bytes out(t.elem, c, oo);
        t.reduce_scatter(x.comm, algo.pol, maybe_null(in.data(), c, k), n * c, maybe_null(out.data(), c, k), c);
        check_values(x, t, d, "out", out.data(), want.data(), c);
        check_guards(x, d, "out", out);
        check_values(x, t, d, "in (must be unchanged)", in.data(), mine.data(), n * c);
        check_guards(x, d, "in", in);
    }
}

//! `t` is a copy-only entry (typed_of<T, copy_only>).
inline void case_broadcast(ctx& x, const named_policy& algo, const typed& t, std::size_t c) {
    const std::uint64_t k = x.k++;
    const int root = int(k % std::uint64_t(x.n));
    const std::size_t oi = off_in(x, k);
    const std::string d = describe(x, "broadcast", algo.name, t.type, "-", c, true, oi, oi, root);
    guarded_bytes buf(t.elem, c, oi);
    // Differs from the root's values on every other rank.
    const std::vector<unsigned char> mine = input_of(t, x.rank, 0, c, true), want = input_of(t, root, 0, c, true);
    if (c != 0) std::memcpy(buf.data(), mine.data(), mine.size());
    t.broadcast(x.comm, algo.pol, maybe_null(buf.data(), c, k), c, root);
    check_values(x, t, d, "buf", buf.data(), want.data(), c);
    check_guards(x, d, "buf", buf);
}

inline void case_reduce(ctx& x, const named_policy& algo, const typed& t, std::size_t c, bool in_place) {
    const std::uint64_t k = x.k++;
    const int root = int((k * 7 + 3) % std::uint64_t(x.n));
    const bool is_root = x.rank == root;
    const std::size_t oi = off_in(x, k), oo = off_out(x, k);
    const std::string d = describe(x, "reduce", algo.name, t.type, t.op, c, in_place, oi, in_place ? oi : oo, root);
    guarded_bytes in(t.elem, c, oi);
    const std::vector<unsigned char> mine = input_of(t, x.rank, 0, c), want = reduced_of(x, t, 0, c);
    if (c != 0) std::memcpy(in.data(), mine.data(), mine.size());
    if (in_place) {
        // Non-roots pass either an empty `out` or `in` itself; both are ignored.
        const bool give = is_root || k % 2;
        t.reduce(x.comm, algo.pol, in.data(), c, give ? in.data() : nullptr, give ? c : 0, root);
        if (is_root) check_values(x, t, d, "buf at the root", in.data(), want.data(), c);
        else check_values(x, t, d, "in at a non-root (must be unchanged)", in.data(), mine.data(), c);
        check_guards(x, d, "buf", in);
    } else {
        guarded_bytes out(t.elem, c, oo);
        const bool give = is_root || k % 2;
        unsigned char* o = give ? out.data() : nullptr;
        t.reduce(x.comm, algo.pol, maybe_null(in.data(), c, k), c, maybe_null(o, c, k), give ? c : 0, root);
        if (is_root) {
            check_values(x, t, d, "out at the root", out.data(), want.data(), c);
        } else {
            for (std::size_t i = 0; i < c; ++i)
                if (!out.untouched(i)) {
                    fail(x, d + ": a non-root's `out` was written at [" + std::to_string(i) + "]");
                    break;
                }
        }
        check_guards(x, d, "out", out);
        check_values(x, t, d, "in (must be unchanged)", in.data(), mine.data(), c);
        check_guards(x, d, "in", in);
    }
}

// The typed front doors: what the matrices call.
template <class T, class Op>
void case_all_reduce(ctx& x, const named_policy& algo, std::size_t c, bool in_place, Op) {
    case_all_reduce(x, algo, typed_of<T, Op>(), c, in_place);
}
template <class T>
void case_all_gather(ctx& x, const named_policy& algo, std::size_t c, bool in_place) {
    case_all_gather(x, algo, typed_of<T, chorus::detail::copy_only>(), c, in_place);
}
template <class T, class Op>
void case_reduce_scatter(ctx& x, const named_policy& algo, std::size_t c, bool in_place, Op) {
    case_reduce_scatter(x, algo, typed_of<T, Op>(), c, in_place);
}
template <class T>
void case_broadcast(ctx& x, const named_policy& algo, std::size_t c) {
    case_broadcast(x, algo, typed_of<T, chorus::detail::copy_only>(), c);
}
template <class T, class Op>
void case_reduce(ctx& x, const named_policy& algo, std::size_t c, bool in_place, Op) {
    case_reduce(x, algo, typed_of<T, Op>(), c, in_place);
}

} // namespace
