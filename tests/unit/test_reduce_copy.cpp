// The reduce-copy layer for every (element type, operator) pair: the only
// code of a collective that depends on the element type and the operator
// (schedules, partitions and the flag protocol do not; they are tested over
// run-time policies in test_policies.cpp, test_schedule.cpp and the
// others). Each pair runs, against a serial reference, bit for bit:
//   host_reduce_copy (the host executor's inner loop, called as the
//     executor calls it: through the erased kernel of exec/host_kernel.hpp):
//     with and without a second source, a second destination, the
//     epilogue, streaming (non-temporal) stores; in place (dst == a) and
//     not; element offsets 0..3 of each buffer from a 64-byte boundary, so
//     heads, 64-byte interiors and tails;
//   host_reduce_fan (the fan-in of one-shot algorithms, also erased): 2..5
//     sources combined in source order, across the accumulator's block
//     boundary, with the destination one of the sources or not;
//   lane_reduce_copy (the GPU kernel's loop, run here by CPU "lanes" one
//     after the other: each lane owns its elements, so the order of lanes
//     does not matter): 1..5 sources, 1 or 2 destinations, 1, 3 and 32
//     lanes, aligned (the 16-byte vector path) and misaligned buffers.
// Guard elements around every destination must stay untouched, sources
// must stay unchanged (unless a destination aliases them).
//
// And the streaming interior at every vector level the CPU supports
// (exec/host_simd.hpp: AVX-512, AVX2, SSE2, and the generic loop, forced
// with host_isa_limit): every built-in operator on float, double, int8,
// uint8, int16, int32, int64, uint64 and the copy, against the operator
// applied element by element, bit for bit: destinations at every
// element-aligned offset 0..63 bytes from a line, sources at others, counts
// around the streaming threshold (4 lines) and line boundaries, with and
// without a second destination, in place (dst == b); integers over their
// whole range where the operator's arithmetic wraps, floats integer-valued
// with zeros of both signs and infinities, and NaNs (told apart by their
// payloads) for min and max.
//
// Types: int8..uint64, float, double, and the user types of the collective
// tests (indexed with argmax, vec3 with vec3_add, affine with the
// non-commutative compose); operators: every one valid for the type.
// Only the pieces that need T and Op are templates (pair_ops below): the
// loops over cases are compiled once.
#include "collective_cases.hpp"

#include <chorus/exec/host_kernel.hpp>
#include <chorus/exec/lane_reduce_copy.hpp>

#include <cmath>
#include <limits>

namespace {

//! The reference epilogue (avg divides by the rank count; the others keep the value).
template <class T, class Op>
T ref_finish(const T& v, int n) {
    if constexpr (std::is_same_v<Op, chorus::avg>) return static_cast<T>(v / static_cast<T>(n));
    else return v;
}

//! Lane `id` of `count`, as exec/lane_reduce_copy.hpp expects.
struct serial_lane {
    int lane = 0, lanes = 1;
    int id() const { return lane; }
    int count() const { return lanes; }
};

//! What the case loops need of one (type, operator).
struct pair_ops {
    std::size_t elem = 1;
    const char* type = "";
    const char* op = "";
    chorus::detail::host_kernel kernel{};
    //! Elements 0..n-1 of input `q` (the collective tests' inputs of rank q).
    void (*fill)(void* dst, int q, std::size_t n) = nullptr;
    //! The left fold of inputs 0..nsrc-1, then the epilogue for finish_n ranks (0: none).
    void (*expect)(void* dst, int nsrc, int finish_n, std::size_t n) = nullptr;
    //! lane_reduce_copy of src[0..nsrc) into dst[0..ndst), run by `lanes` serial lanes.
    void (*lanes)(const void* const* src, int nsrc, void* const* dst, int ndst, std::size_t n, int finish_n,
                  int lanes) = nullptr;
    //! One element as text.
    std::string (*show)(const void* v) = nullptr;
};

template <class T, class Op>
pair_ops ops_of() {
    static const Op op{};
    pair_ops o;
    o.elem = sizeof(T);
    o.type = type_name<T>();
    o.op = op_name<Op>();
    o.kernel = chorus::detail::host_kernel_of<T>(op);
    o.fill = [](void* dst, int q, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) {
            const T v = gen<T>(pattern_for<T, Op>(), q, i);
            std::memcpy(static_cast<unsigned char*>(dst) + i * sizeof(T), &v, sizeof(T));
        }
    };
    o.expect = [](void* dst, int nsrc, int finish_n, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) {
            T v = gen<T>(pattern_for<T, Op>(), 0, i);
            for (int q = 1; q < nsrc; ++q) v = ref_combine(op, v, gen<T>(pattern_for<T, Op>(), q, i));
            if (finish_n > 0) v = ref_finish<T, Op>(v, finish_n);
            std::memcpy(static_cast<unsigned char*>(dst) + i * sizeof(T), &v, sizeof(T));
        }
    };
    o.lanes = [](const void* const* src, int nsrc, void* const* dst, int ndst, std::size_t n, int finish_n,
                 int lanes) {
        const T* s[8];
        for (int q = 0; q < nsrc; ++q) s[q] = static_cast<const T*>(src[q]);
        chorus::detail::reduce_copy_args<T> a{};
        a.src = s;
        a.nsrc = nsrc;
        for (int d = 0; d < ndst; ++d) a.dst[d] = static_cast<T*>(dst[d]);
        a.ndst = ndst;
        a.count = n;
        a.finish_n = finish_n;
        for (int l = 0; l < lanes; ++l) chorus::detail::lane_reduce_copy(serial_lane{l, lanes}, a, op);
    };
    o.show = [](const void* v) {
        T x;
        std::memcpy(static_cast<void*>(&x), v, sizeof(T));
        return chorus_test::show(x);
    };
    return o;
}

//! `len` elements of `elem` bytes at element offset `off` of a store with
//! guard elements after them; the store starts 64-byte aligned, so the
//! offset sets the buffer's phase.
class buf {
public:
    static constexpr std::size_t guard = 3;
    static constexpr unsigned char fill_byte = 0xA5;

    buf(std::size_t elem, std::size_t len, std::size_t off)
        : raw_((off + len + guard) * elem + 64, fill_byte), elem_(elem), off_(off), len_(len) {}
    unsigned char* data() {
        const auto p = reinterpret_cast<std::uintptr_t>(raw_.data());
        return raw_.data() + (64 - p % 64) % 64 + off_ * elem_;
    }
    const unsigned char* at(std::size_t i) { return data() + i * elem_; }
    //! True when no byte of the span was written.
    bool untouched() {
        const unsigned char* b = data();
        for (std::size_t i = 0; i < len_ * elem_; ++i)
            if (b[i] != fill_byte) return false;
        return true;
    }
    //! True when the guard elements before and after the span still hold the fill.
    bool guards_intact() {
        const unsigned char* b = data();
        for (const unsigned char* q = b - off_ * elem_; q < b; ++q)
            if (*q != fill_byte) return false;
        for (std::size_t i = len_ * elem_; i < (len_ + guard) * elem_; ++i)
            if (b[i] != fill_byte) return false;
        return true;
    }

private:
    std::vector<unsigned char> raw_;
    std::size_t elem_, off_, len_;
};

//! The failures of one (type, operator): the first few are kept.
struct pair_log {
    std::vector<std::string> first;
    std::size_t count = 0, cases = 0;
    void add(const std::string& s) {
        if (first.size() < 8) first.push_back(s);
        ++count;
    }
};

//! The first element where `got` differs from `want` (n elements), or -1.
long long first_difference(const pair_ops& o, const unsigned char* got, const unsigned char* want, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        if (std::memcmp(got + i * o.elem, want + i * o.elem, o.elem) != 0) return static_cast<long long>(i);
    return -1;
}

void report(pair_log& log, const pair_ops& o, const std::string& what, const unsigned char* got,
            const unsigned char* want, long long i) {
    log.add(std::string(what) + " " + o.type + " " + o.op + ": element " + std::to_string(i) + " is " +
            o.show(got + std::size_t(i) * o.elem) + ", expected " + o.show(want + std::size_t(i) * o.elem));
}

void check_host_reduce_copy(const pair_ops& o, pair_log& log) {
    const chorus::detail::host_kernel& k = o.kernel;
    for (std::size_t n : {0, 1, 3, 17, 63, 64, 65, 257, 1031}) {
        std::vector<unsigned char> a0(n * o.elem), b0(n * o.elem), want(n * o.elem);
        o.fill(a0.data(), 0, n);
        o.fill(b0.data(), 1, n);
        for (int variant = 0; variant < 16; ++variant) {
            const bool two = variant & 1, dual = variant & 2, fin = variant & 4, streaming = variant & 8;
            o.expect(want.data(), two ? 2 : 1, fin ? 3 : 0, n);
            for (std::size_t off = 0; off < 4; ++off)
                for (const bool in_place : {false, true}) {
                    ++log.cases;
                    buf a(o.elem, n, off), b(o.elem, n, (off + 1) % 4), d(o.elem, n, (off + 2) % 4),
                        d2(o.elem, n, (off * 3) % 4);
                    if (n != 0) {
                        std::memcpy(a.data(), a0.data(), a0.size());
                        std::memcpy(b.data(), b0.data(), b0.size());
                    }
                    unsigned char* dst = in_place ? a.data() : d.data();
                    k.reduce_copy(k.op, dst, dual ? d2.data() : nullptr, a.data(), two ? b.data() : nullptr, n,
                                  fin ? 3 : 0, streaming);
                    chorus::detail::store_fence();
                    const std::string what = "host_reduce_copy n=" + std::to_string(n) + " variant=" +
                                             std::to_string(variant) + " offset=" + std::to_string(off) +
                                             (in_place ? " in place" : "");
                    if (long long i = first_difference(o, dst, want.data(), n); i >= 0)
                        report(log, o, what, dst, want.data(), i);
                    else if (dual && (i = first_difference(o, d2.data(), want.data(), n)) >= 0)
                        report(log, o, what + " (dst2)", d2.data(), want.data(), i);
                    if (!in_place && first_difference(o, a.data(), a0.data(), n) >= 0)
                        log.add(what + " " + o.type + " " + o.op + ": source a changed");
                    if (first_difference(o, b.data(), b0.data(), n) >= 0)
                        log.add(what + " " + o.type + " " + o.op + ": source b changed");
                    if (!a.guards_intact() || !b.guards_intact() || !d.guards_intact() || !d2.guards_intact())
                        log.add(what + " " + o.type + " " + o.op + ": a guard element was written");
                    if (!dual && !d2.untouched())
                        log.add(what + " " + o.type + " " + o.op + ": dst2 written without being given");
                }
        }
    }
}

void check_host_reduce_fan(const pair_ops& o, pair_log& log) {
    const chorus::detail::host_kernel& k = o.kernel;
    const std::size_t block = o.elem >= 4096 ? 1 : 4096 / o.elem; // host_reduce_fan's accumulator
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), block + 5, 2 * block + 1})
        for (int nsrc : {2, 3, 5}) {
            std::vector<unsigned char> want(n * o.elem);
            o.expect(want.data(), nsrc, 4, n);
            for (int variant = 0; variant < 4; ++variant) {
                ++log.cases;
                const bool dual = variant & 1, alias = variant & 2; // alias: dst is source 1
                std::vector<buf> src;
                for (int q = 0; q < nsrc; ++q) {
                    src.emplace_back(o.elem, n, std::size_t(q) % 4);
                    o.fill(src.back().data(), q, n);
                }
                buf d(o.elem, n, 1), d2(o.elem, n, 2);
                std::vector<const void*> ptrs;
                for (auto& s : src) ptrs.push_back(s.data());
                unsigned char* dst = alias ? src[1].data() : d.data();
                k.reduce_fan(k.op, dst, dual ? d2.data() : nullptr, ptrs.data(), nsrc, n, 4);
                const std::string what = "host_reduce_fan n=" + std::to_string(n) + " sources=" +
                                         std::to_string(nsrc) + " variant=" + std::to_string(variant);
                if (long long i = first_difference(o, dst, want.data(), n); i >= 0)
                    report(log, o, what, dst, want.data(), i);
                else if (dual && (i = first_difference(o, d2.data(), want.data(), n)) >= 0)
                    report(log, o, what + " (dst2)", d2.data(), want.data(), i);
                bool guards = d.guards_intact() && d2.guards_intact();
                for (auto& s : src) guards = guards && s.guards_intact();
                if (!guards) log.add(what + " " + o.type + " " + o.op + ": a guard element was written");
            }
        }
}

void check_lane_reduce_copy(const pair_ops& o, pair_log& log) {
    for (std::size_t n : {0, 1, 5, 16, 33, 250})
        for (int nsrc : {1, 2, 3, 5}) {
            const int finish_n = nsrc > 1 ? nsrc : 0;
            std::vector<unsigned char> want(n * o.elem);
            o.expect(want.data(), nsrc, finish_n, n);
            for (int ndst : {1, 2})
                for (bool aligned : {true, false})
                    for (int lanes : {1, 3, 32}) {
                        ++log.cases;
                        std::vector<buf> src, dst;
                        for (int q = 0; q < nsrc; ++q) {
                            src.emplace_back(o.elem, n, aligned ? 0 : std::size_t(q + 1) % 4);
                            o.fill(src.back().data(), q, n);
                        }
                        for (int d = 0; d < ndst; ++d) dst.emplace_back(o.elem, n, aligned ? 0 : std::size_t(d) % 4);
                        const void* s[8];
                        void* t[2];
                        for (int q = 0; q < nsrc; ++q) s[q] = src[std::size_t(q)].data();
                        for (int d = 0; d < ndst; ++d) t[d] = dst[std::size_t(d)].data();
                        o.lanes(s, nsrc, t, ndst, n, finish_n, lanes);
                        const std::string what = "lane_reduce_copy n=" + std::to_string(n) + " sources=" +
                                                 std::to_string(nsrc) + " destinations=" + std::to_string(ndst) +
                                                 (aligned ? " aligned" : " misaligned") +
                                                 " lanes=" + std::to_string(lanes);
                        for (auto& d : dst)
                            if (const long long i = first_difference(o, d.data(), want.data(), n); i >= 0) {
                                report(log, o, what, d.data(), want.data(), i);
                                break;
                            }
                        bool guards = true;
                        for (auto& d : dst) guards = guards && d.guards_intact();
                        if (!guards) log.add(what + " " + o.type + " " + o.op + ": a guard element was written");
                    }
        }
}

//! Every check of one (type, operator); returns the cases run.
std::size_t check_pair(const pair_ops& o) {
    pair_log log;
    check_host_reduce_copy(o, log);
    check_host_reduce_fan(o, log);
    check_lane_reduce_copy(o, log);
    for (const auto& s : log.first) FAIL_CHECK(s);
    CHECK_MESSAGE(log.count == 0, std::string(o.type) << " " << o.op << ": " << log.count << " failures");
    return log.cases;
}

template <class T, class List>
std::size_t check_ops() {
    std::size_t cases = 0;
    for_each_op<List>([&](auto op) { cases += check_pair(ops_of<T, decltype(op)>()); });
    return cases;
}

} // namespace

TEST_CASE_TEMPLATE("reduce-copy layer: every operator on every integer type", T, std::int8_t, std::uint8_t,
                   std::int16_t, std::uint16_t, std::int32_t, std::uint32_t, std::int64_t, std::uint64_t) {
    MESSAGE(std::string(type_name<T>()) << ": " << check_ops<T, all_integral_ops>() << " cases");
}

TEST_CASE_TEMPLATE("reduce-copy layer: every operator on every floating-point type", T, float, double) {
    MESSAGE(std::string(type_name<T>()) << ": " << check_ops<T, all_float_ops>() << " cases");
}

TEST_CASE("reduce-copy layer: user types and operators (argmax, vec3 addition, non-commutative composition)") {
    std::size_t cases = check_pair(ops_of<indexed, argmax_op>());
    cases += check_pair(ops_of<vec3, vec3_add>());
    cases += check_pair(ops_of<affine, compose_op>());
    MESSAGE(cases << " cases");
}

// --- the streaming interior at every vector level --------------------------------

namespace {

//! A value of input q (0: a, 1: b) at element i for the vector-level test:
//! see the file comment.
template <class T, class Op>
T level_value(int q, std::size_t i) {
    std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull + std::uint64_t(q + 1) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    if constexpr (std::is_floating_point_v<T>) {
        constexpr bool minmax = std::is_same_v<Op, chorus::min> || std::is_same_v<Op, chorus::max>;
        switch (h % 16) {
        case 0: return T(-0.0);
        case 1: return T(0.0);
        case 2: return std::numeric_limits<T>::infinity();
        case 3: return -std::numeric_limits<T>::infinity();
        case 4:
        case 5:
            if constexpr (minmax) { // a quiet NaN whose payload tells which input it came from
                using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
                U bits;
                const T nan = std::numeric_limits<T>::quiet_NaN();
                std::memcpy(&bits, &nan, sizeof(T));
                bits |= U(q + 1) | (U(h % 2) << (sizeof(T) * 8 - 1)); // payload, and either sign
                T v;
                std::memcpy(&v, &bits, sizeof(T));
                return v;
            }
            [[fallthrough]];
        default: return T(static_cast<int>((h >> 8) % 129) - 64);
        }
    } else {
        // Wrapping arithmetic where the operator's is defined to wrap (types
        // narrower than int and unsigned types); else small enough for + and
        // * not to overflow (signed overflow is undefined in the reference too).
        constexpr bool wraps = sizeof(T) < sizeof(int) || std::is_unsigned_v<T>;
        constexpr bool arith = std::is_same_v<Op, chorus::sum> || std::is_same_v<Op, chorus::prod> ||
                               std::is_same_v<Op, chorus::avg>;
        if constexpr (wraps || !arith) return static_cast<T>(h);
        else if constexpr (std::is_same_v<Op, chorus::prod>) return static_cast<T>(static_cast<std::int64_t>(h % 60001) - 30000);
        else return static_cast<T>(static_cast<std::int64_t>(h % 2000000001) - 1000000000);
    }
}

//! One element's text for messages (bits in hex: NaN payloads and zero signs show).
template <class T>
std::string level_show(const T& v) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    char hex[24];
    std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(bits));
    return chorus_test::show(v) + " (0x" + hex + ")";
}

//! Every case of (T, Op) at the active level: `copy` tests b == null.
template <class T, class Op>
void check_levels_pair(bool copy, pair_log& log, const char* level) {
    static const Op op{};
    constexpr std::size_t per = 64 / sizeof(T);
    constexpr std::size_t stream_min = 256 / sizeof(T); // host_reduce_copy's streaming threshold
    const bool has_fin = chorus::detail::has_finish<Op, T>;
    const std::size_t counts[] = {stream_min - 1, stream_min, stream_min + per - 1, 5 * per + 1, 37 * per + 3};
    constexpr std::size_t cap = 37 * per + 3 + 2 * per;
    std::vector<T> a0(cap), b0(cap), want(cap);
    for (std::size_t i = 0; i < cap; ++i) {
        a0[i] = level_value<T, Op>(0, i);
        b0[i] = level_value<T, Op>(1, i);
    }
    // One arena per buffer: 64-byte aligned, room for an offset of up to a line and guard lines.
    const std::size_t bytes = cap * sizeof(T) + 3 * 64;
    std::vector<unsigned char> ra(bytes + 64), rb(bytes + 64), rd(bytes + 64), rd2(bytes + 64);
    auto base = [](std::vector<unsigned char>& r) {
        const auto p = reinterpret_cast<std::uintptr_t>(r.data());
        return r.data() + (64 - p % 64) % 64 + 64; // a guard line before
    };
    unsigned char *pa = base(ra), *pb = base(rb), *pd = base(rd), *pd2 = base(rd2);
    for (const std::size_t n : counts)
        for (const int fin : {0, 1}) {
            if (fin && !has_fin) continue;
            const int finish_n = fin ? 3 : 0;
            for (std::size_t i = 0; i < n; ++i) {
                T v = copy ? a0[i] : static_cast<T>(op(a0[i], b0[i]));
                if (finish_n > 0) v = chorus::detail::finish(op, v, finish_n);
                want[i] = v;
            }
            for (std::size_t off = 0; off < per; ++off)
                for (int variant = 0; variant < 4; ++variant) {
                    const bool dual = variant & 1, in_place = variant & 2;
                    if (in_place && copy) continue;
                    ++log.cases;
                    // dst at `off`; dst2 in the same phase (or, for one offset, another);
                    // the sources elsewhere in their lines.
                    const std::size_t off2 = off == 1 ? 2 : off, offa = (off * 7 + 3) % per, offb = (off + 5) % per;
                    std::memset(rd.data(), 0xA5, rd.size());
                    std::memset(rd2.data(), 0xA5, rd2.size());
                    T* a = reinterpret_cast<T*>(pa) + offa;
                    T* b = in_place ? reinterpret_cast<T*>(pd) + off : reinterpret_cast<T*>(pb) + offb;
                    T* d = reinterpret_cast<T*>(pd) + off;
                    T* d2 = dual ? reinterpret_cast<T*>(pd2) + off2 : nullptr;
                    std::memcpy(a, a0.data(), n * sizeof(T));
                    std::memcpy(b, b0.data(), n * sizeof(T));
                    chorus::detail::host_reduce_copy(d, d2, a, copy ? nullptr : b, n, op, finish_n, true);
                    chorus::detail::store_fence();
                    const auto what = [&] {
                        return std::string(level) + " " + type_name<T>() + " " + (copy ? "copy" : op_name<Op>()) +
                               " n=" + std::to_string(n) + " dst offset=" + std::to_string(off * sizeof(T)) + "B" +
                               (fin ? " finish" : "") + (dual ? " dst2" : "") + (in_place ? " in place (dst == b)" : "");
                    };
                    for (T* out : {d, d2}) {
                        if (out == nullptr) continue;
                        if (std::memcmp(out, want.data(), n * sizeof(T)) != 0) {
                            std::size_t i = 0;
                            while (std::memcmp(out + i, &want[i], sizeof(T)) == 0) ++i;
                            log.add(what() + (out == d2 ? " (dst2)" : "") + ": element " + std::to_string(i) + " is " +
                                    level_show(out[i]) + ", expected " + level_show(want[i]) + " from a=" +
                                    level_show(a0[i]) + " b=" + level_show(b0[i]));
                        }
                        // Guards: a line before, the rest of the arena after.
                        const unsigned char* o = reinterpret_cast<const unsigned char*>(out);
                        const unsigned char* r0 = out == d ? rd.data() : rd2.data();
                        const unsigned char* r1 = r0 + rd.size();
                        bool intact = true;
                        for (const unsigned char* q = r0; q < o; ++q) intact = intact && *q == 0xA5;
                        for (const unsigned char* q = o + n * sizeof(T); q < r1; ++q) intact = intact && *q == 0xA5;
                        if (!intact) log.add(what() + ": a byte outside the destination was written");
                    }
                    if (std::memcmp(a, a0.data(), n * sizeof(T)) != 0) log.add(what() + ": source a changed");
                }
        }
}

template <class T, class... Ops>
std::size_t check_levels(op_list<Ops...>*) {
    using chorus::detail::host_isa;
    std::size_t cases = 0;
    const host_isa top = chorus::detail::host_isa_supported();
    const host_isa before = chorus::detail::host_isa_active();
    for (int l = static_cast<int>(top); l >= 0; --l) {
        const auto level = static_cast<host_isa>(l);
        chorus::detail::host_isa_limit(level);
        REQUIRE(chorus::detail::host_isa_active() == level);
        pair_log log;
        check_levels_pair<T, chorus::sum>(true, log, chorus::detail::host_isa_name(level));
        check_levels_pair<T, chorus::avg>(true, log, chorus::detail::host_isa_name(level));
        (check_levels_pair<T, Ops>(false, log, chorus::detail::host_isa_name(level)), ...);
        for (const auto& s : log.first) FAIL_CHECK(s);
        const std::string summary = std::string(chorus::detail::host_isa_name(level)) + " " + type_name<T>() + ": " +
                                    std::to_string(log.count) + " failures";
        CHECK_MESSAGE(log.count == 0, summary);
        cases += log.cases;
    }
    chorus::detail::host_isa_limit(before);
    return cases;
}

} // namespace

TEST_CASE_TEMPLATE("reduce-copy layer: the streaming interior at every vector level the CPU has", T, float, double,
                   std::int8_t, std::uint8_t, std::int16_t, std::int32_t, std::int64_t, std::uint64_t) {
    using list = std::conditional_t<std::is_floating_point_v<T>, all_float_ops, all_integral_ops>;
    const std::size_t cases = check_levels<T>(static_cast<list*>(nullptr));
    MESSAGE(std::string(type_name<T>()) << ": " << cases << " cases at every level up to "
                                        << std::string(chorus::detail::host_isa_name(chorus::detail::host_isa_supported())));
}
