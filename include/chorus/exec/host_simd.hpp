#pragma once
//! \file exec/host_simd.hpp
//! Whole 64-byte lines computed in vector registers and written with
//! non-temporal stores, for the built-in operators on arithmetic types:
//! the streaming interior of host_reduce_copy (exec/host_reduce_copy.hpp)
//! and the benchmark's copy ceiling and fused reference.
//!
//! The instruction set is chosen at run time, so a binary built for
//! baseline x86-64 still uses AVX-512 or AVX2 where the CPU has them: each
//! level has its own loop compiled with `__attribute__((target(...)))`, and
//! host_isa_active() (one relaxed load after the first call) says which
//! runs. Levels: AVX-512 (F, BW, DQ, VL: one 64-byte store per line), AVX2
//! (two 32-byte stores), SSE2 (four 16-byte stores; part of baseline
//! x86-64), and `generic`, the element-by-element loop of
//! host_reduce_copy, which is all there is off x86-64, on compilers other
//! than GCC and Clang, and in nvcc's device pass.
//!
//! The arithmetic is written with GCC/Clang vector extensions (element-wise
//! +, *, /, &, |, ^, < and ?:), whose meaning per element is the scalar
//! expression's: the result is bit for bit the built-in operator's,
//! min/max included (`b < a ? b : a` keeps a when either is NaN and when
//! both are zeros, as the operator does). Integer sums and products are
//! computed in the unsigned type of the same width (the same bits as the
//! operators' wrapping conversion). The integer average's division stays
//! on the generic loop (no vector integer division).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../ops/operators.hpp"
#include "../ops/traits.hpp"

// CHORUS_HOST_SIMD: 1 where the vector levels exist (x86-64 with GCC or
// Clang, nvcc's host pass included); a build may define it to 0 to keep
// every pair on the generic loop.
#if !defined(CHORUS_HOST_SIMD)
#  if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && \
      !defined(__CUDA_ARCH__)
#    define CHORUS_HOST_SIMD 1
#  else
#    define CHORUS_HOST_SIMD 0
#  endif
#endif
#if CHORUS_HOST_SIMD
#  include <immintrin.h>
#  define CHORUS_SIMD_INLINE inline __attribute__((always_inline))
#  define CHORUS_TARGET_AVX2 __attribute__((target("avx2")))
#  define CHORUS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#endif

namespace chorus::detail {

//! The vector levels of the streaming loops, lowest first.
enum class host_isa : int { generic = 0, sse2 = 1, avx2 = 2, avx512 = 3 };

inline const char* host_isa_name(host_isa isa) {
    switch (isa) {
    case host_isa::avx512: return "AVX-512";
    case host_isa::avx2: return "AVX2";
    case host_isa::sse2: return "SSE2";
    default: return "generic";
    }
}

//! Bytes per store of a level (0: the generic loop's element stores).
inline std::size_t host_isa_store_bytes(host_isa isa) {
    switch (isa) {
    case host_isa::avx512: return 64;
    case host_isa::avx2: return 32;
    case host_isa::sse2: return 16;
    default: return 0;
    }
}

//! The highest level this CPU (and OS) supports, asked once.
inline host_isa host_isa_supported() {
#if CHORUS_HOST_SIMD
    static const host_isa level = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
            return host_isa::avx512;
        if (__builtin_cpu_supports("avx2")) return host_isa::avx2;
        return host_isa::sse2;
    }();
    return level;
#else
    return host_isa::generic;
#endif
}

//! The level in use (-1 until first asked); see host_isa_active().
inline std::atomic<int> host_isa_state{-1};

//! The level the streaming loops use: the supported one unless a test
//! lowered it with host_isa_limit(). One relaxed load per call.
inline host_isa host_isa_active() {
    int s = host_isa_state.load(std::memory_order_relaxed);
    if (s < 0) [[unlikely]] {
        s = static_cast<int>(host_isa_supported());
        int expected = -1;
        if (!host_isa_state.compare_exchange_strong(expected, s, std::memory_order_relaxed)) s = expected;
    }
    return static_cast<host_isa>(s);
}

//! Test and benchmark hook: use at most `cap` (never more than the CPU
//! supports) from now on; returns the level used before. Not for use while
//! another thread runs a collective whose results are compared with a
//! different level (every level gives the same bits, only the speed differs).
inline host_isa host_isa_limit(host_isa cap) {
    const host_isa before = host_isa_active();
    const host_isa top = host_isa_supported();
    host_isa_state.store(static_cast<int>(cap < top ? cap : top), std::memory_order_relaxed);
    return before;
}

// ---------------------------------------------------------------------------
// Which (element type, operator) pairs have a vector form
// ---------------------------------------------------------------------------

enum class simd_kind { none, add, mul, min, max, bit_and, bit_or, bit_xor };

//! The vector form of Op's combine step on T (none: the generic loop).
template <class T, class Op>
constexpr simd_kind simd_kind_of() {
    constexpr bool fp = std::is_same_v<T, float> || std::is_same_v<T, double>;
    constexpr bool in = std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                        (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);
    if constexpr (!fp && !in) return simd_kind::none;
    else if constexpr (std::is_same_v<Op, chorus::sum> || std::is_same_v<Op, chorus::avg>) return simd_kind::add;
    else if constexpr (std::is_same_v<Op, chorus::prod>) return simd_kind::mul;
    else if constexpr (std::is_same_v<Op, chorus::min>) return simd_kind::min;
    else if constexpr (std::is_same_v<Op, chorus::max>) return simd_kind::max;
    else if constexpr (in && std::is_same_v<Op, chorus::bit_and>) return simd_kind::bit_and;
    else if constexpr (in && std::is_same_v<Op, chorus::bit_or>) return simd_kind::bit_or;
    else if constexpr (in && std::is_same_v<Op, chorus::bit_xor>) return simd_kind::bit_xor;
    else return simd_kind::none;
}

//! True when Op's epilogue on T has a vector form: the floating-point
//! average's division (or no epilogue at all).
template <class T, class Op>
constexpr bool simd_finish_of() {
    if constexpr (!has_finish<Op, T>) return true;
    else return std::is_same_v<Op, chorus::avg> && (std::is_same_v<T, float> || std::is_same_v<T, double>);
}

//! The lane type the vector code computes T in (same size and bits):
//! floating types themselves; integers as the fixed-width type of their
//! size and signedness, unsigned for + and * (wrapping, defined).
template <class T, simd_kind K>
struct simd_lane {
    using type = T;
};
template <class T, simd_kind K>
    requires std::is_integral_v<T>
struct simd_lane<T, K> {
    template <std::size_t S, bool Signed>
    static auto pick() {
        if constexpr (S == 1) return std::conditional_t<Signed, std::int8_t, std::uint8_t>{};
        else if constexpr (S == 2) return std::conditional_t<Signed, std::int16_t, std::uint16_t>{};
        else if constexpr (S == 4) return std::conditional_t<Signed, std::int32_t, std::uint32_t>{};
        else return std::conditional_t<Signed, std::int64_t, std::uint64_t>{};
    }
    using type = decltype(pick<sizeof(T), std::is_signed_v<T> && K != simd_kind::add && K != simd_kind::mul>());
};

#if CHORUS_HOST_SIMD

template <class L, std::size_t W>
struct simd_vec {
    typedef L type __attribute__((vector_size(W)));
};
template <class L, std::size_t W>
using simd_vec_t = typename simd_vec<L, W>::type;

// The helpers below carry no target attribute and are always inlined into
// the per-level loops, which do: the vector code is generated for the
// loop's level. They pass vectors by reference only (a vector argument or
// result of a width the default target lacks changes the ABI).

template <std::size_t W, class L>
CHORUS_SIMD_INLINE void simd_load(simd_vec_t<L, W>& v, const L* p) {
    __builtin_memcpy(&v, p, W);
}

//! v = v op x, element by element, as the scalar operator does it with a = v, b = x.
template <simd_kind K, std::size_t W, class L>
CHORUS_SIMD_INLINE void simd_combine(simd_vec_t<L, W>& v, const simd_vec_t<L, W>& x) {
    if constexpr (K == simd_kind::add) v = v + x;
    else if constexpr (K == simd_kind::mul) v = v * x;
    else if constexpr (K == simd_kind::min) v = x < v ? x : v;       // min: b < a ? b : a
    else if constexpr (K == simd_kind::max) v = v < x ? x : v;       // max: a < b ? b : a
    else if constexpr (K == simd_kind::bit_and) v = v & x;
    else if constexpr (K == simd_kind::bit_or) v = v | x;
    else if constexpr (K == simd_kind::bit_xor) v = v ^ x;
}

//! The W-byte vectors of one 64-byte line at element i: v = finish(a op b),
//! b and finish as the flags say (div: the rank count in every element).
template <simd_kind K, bool HasB, bool Fin, std::size_t W, class L>
CHORUS_SIMD_INLINE void simd_line(simd_vec_t<L, W> (&v)[64 / W], const L* a, const L* b,
                                  const simd_vec_t<L, W>& div) {
    constexpr std::size_t per = W / sizeof(L);
    for (std::size_t j = 0; j < 64 / W; ++j) {
        simd_load<W>(v[j], a + j * per);
        if constexpr (HasB) {
            simd_vec_t<L, W> x;
            simd_load<W>(x, b + j * per);
            simd_combine<K, W, L>(v[j], x);
        }
        if constexpr (Fin) v[j] = v[j] / div;
    }
}

template <std::size_t W, class L>
CHORUS_SIMD_INLINE void simd_splat(simd_vec_t<L, W>& v, L x) {
    for (std::size_t j = 0; j < W / sizeof(L); ++j) v[j] = x;
}

// One loop per level: `lines` 64-byte lines from element 0; dst (and dst2)
// 64-byte aligned. The flags are template parameters, so no branch is left
// in the loop.

template <simd_kind K, bool HasB, bool Fin, bool Dual, class L>
void simd_lines_sse2(L* dst, L* dst2, const L* a, const L* b, std::size_t lines, int finish_n) {
    constexpr std::size_t W = 16, per = 64 / sizeof(L);
    simd_vec_t<L, W> div;
    simd_splat<W>(div, static_cast<L>(finish_n));
    for (std::size_t k = 0; k < lines; ++k) {
        const std::size_t i = k * per;
        simd_vec_t<L, W> v[4];
        simd_line<K, HasB, Fin, W>(v, a + i, HasB ? b + i : nullptr, div);
        auto* d = reinterpret_cast<__m128i*>(dst + i);
        for (int j = 0; j < 4; ++j) _mm_stream_si128(d + j, reinterpret_cast<const __m128i&>(v[j]));
        if constexpr (Dual) {
            auto* d2 = reinterpret_cast<__m128i*>(dst2 + i);
            for (int j = 0; j < 4; ++j) _mm_stream_si128(d2 + j, reinterpret_cast<const __m128i&>(v[j]));
        }
    }
}

template <simd_kind K, bool HasB, bool Fin, bool Dual, class L>
CHORUS_TARGET_AVX2 void simd_lines_avx2(L* dst, L* dst2, const L* a, const L* b, std::size_t lines, int finish_n) {
    constexpr std::size_t W = 32, per = 64 / sizeof(L);
    simd_vec_t<L, W> div;
    simd_splat<W>(div, static_cast<L>(finish_n));
    for (std::size_t k = 0; k < lines; ++k) {
        const std::size_t i = k * per;
        simd_vec_t<L, W> v[2];
        simd_line<K, HasB, Fin, W>(v, a + i, HasB ? b + i : nullptr, div);
        auto* d = reinterpret_cast<__m256i*>(dst + i);
        _mm256_stream_si256(d, reinterpret_cast<const __m256i&>(v[0]));
        _mm256_stream_si256(d + 1, reinterpret_cast<const __m256i&>(v[1]));
        if constexpr (Dual) {
            auto* d2 = reinterpret_cast<__m256i*>(dst2 + i);
            _mm256_stream_si256(d2, reinterpret_cast<const __m256i&>(v[0]));
            _mm256_stream_si256(d2 + 1, reinterpret_cast<const __m256i&>(v[1]));
        }
    }
}

template <simd_kind K, bool HasB, bool Fin, bool Dual, class L>
CHORUS_TARGET_AVX512 void simd_lines_avx512(L* dst, L* dst2, const L* a, const L* b, std::size_t lines,
                                            int finish_n) {
    constexpr std::size_t W = 64, per = 64 / sizeof(L);
    simd_vec_t<L, W> div;
    simd_splat<W>(div, static_cast<L>(finish_n));
    for (std::size_t k = 0; k < lines; ++k) {
        const std::size_t i = k * per;
        simd_vec_t<L, W> v[1];
        simd_line<K, HasB, Fin, W>(v, a + i, HasB ? b + i : nullptr, div);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), reinterpret_cast<const __m512i&>(v[0]));
        if constexpr (Dual)
            _mm512_stream_si512(reinterpret_cast<__m512i*>(dst2 + i), reinterpret_cast<const __m512i&>(v[0]));
    }
}

template <simd_kind K, bool HasB, bool Fin, bool Dual, class L>
inline void simd_lines_at(host_isa isa, L* dst, L* dst2, const L* a, const L* b, std::size_t lines, int finish_n) {
    if (isa == host_isa::avx512) simd_lines_avx512<K, HasB, Fin, Dual>(dst, dst2, a, b, lines, finish_n);
    else if (isa == host_isa::avx2) simd_lines_avx2<K, HasB, Fin, Dual>(dst, dst2, a, b, lines, finish_n);
    else simd_lines_sse2<K, HasB, Fin, Dual>(dst, dst2, a, b, lines, finish_n);
}

template <simd_kind K, bool HasB, bool Fin, class L>
inline void simd_lines_dual(host_isa isa, L* dst, L* dst2, const L* a, const L* b, std::size_t lines,
                            int finish_n) {
    if (dst2 != nullptr) simd_lines_at<K, HasB, Fin, true>(isa, dst, dst2, a, b, lines, finish_n);
    else simd_lines_at<K, HasB, Fin, false>(isa, dst, dst2, a, b, lines, finish_n);
}

// The fan-in form (the benchmark's fused reference): every destination =
// src[0] op src[1] op ... op src[nsrc-1], line by line from element `first`.

template <simd_kind K, std::size_t W, class L>
CHORUS_SIMD_INLINE void simd_fan_line(simd_vec_t<L, W> (&v)[64 / W], const L* const* src, int nsrc, std::size_t i) {
    constexpr std::size_t per = W / sizeof(L);
    for (std::size_t j = 0; j < 64 / W; ++j) simd_load<W>(v[j], src[0] + i + j * per);
    for (int q = 1; q < nsrc; ++q)
        for (std::size_t j = 0; j < 64 / W; ++j) {
            simd_vec_t<L, W> x;
            simd_load<W>(x, src[q] + i + j * per);
            simd_combine<K, W, L>(v[j], x);
        }
}

template <simd_kind K, class L>
void simd_fan_sse2(L* const* dst, int ndst, const L* const* src, int nsrc, std::size_t first, std::size_t lines) {
    constexpr std::size_t W = 16, per = 64 / sizeof(L);
    for (std::size_t k = 0; k < lines; ++k) {
        const std::size_t i = first + k * per;
        simd_vec_t<L, W> v[4];
        simd_fan_line<K, W>(v, src, nsrc, i);
        for (int d = 0; d < ndst; ++d)
            for (int j = 0; j < 4; ++j)
                _mm_stream_si128(reinterpret_cast<__m128i*>(dst[d] + i) + j, reinterpret_cast<const __m128i&>(v[j]));
    }
}

template <simd_kind K, class L>
CHORUS_TARGET_AVX2 void simd_fan_avx2(L* const* dst, int ndst, const L* const* src, int nsrc, std::size_t first,
                                      std::size_t lines) {
    constexpr std::size_t W = 32, per = 64 / sizeof(L);
    for (std::size_t k = 0; k < lines; ++k) {
        const std::size_t i = first + k * per;
        simd_vec_t<L, W> v[2];
        simd_fan_line<K, W>(v, src, nsrc, i);
        for (int d = 0; d < ndst; ++d) {
            auto* o = reinterpret_cast<__m256i*>(dst[d] + i);
            _mm256_stream_si256(o, reinterpret_cast<const __m256i&>(v[0]));
            _mm256_stream_si256(o + 1, reinterpret_cast<const __m256i&>(v[1]));
        }
    }
}

template <simd_kind K, class L>
CHORUS_TARGET_AVX512 void simd_fan_avx512(L* const* dst, int ndst, const L* const* src, int nsrc, std::size_t first,
                                          std::size_t lines) {
    constexpr std::size_t W = 64, per = 64 / sizeof(L);
    for (std::size_t k = 0; k < lines; ++k) {
        const std::size_t i = first + k * per;
        simd_vec_t<L, W> v[1];
        simd_fan_line<K, W>(v, src, nsrc, i);
        for (int d = 0; d < ndst; ++d)
            _mm512_stream_si512(reinterpret_cast<__m512i*>(dst[d] + i), reinterpret_cast<const __m512i&>(v[0]));
    }
}

#endif // CHORUS_HOST_SIMD

//! The fan-in of `nsrc` sources into `ndst` destinations over whole lines:
//! for elements [first, first + lines * 64 / sizeof(T)), every dst[d][i] =
//! src[0][i] op ... op src[nsrc-1][i], combined in source order, computed
//! in vector registers and written with non-temporal stores at level `isa`
//! (at most host_isa_supported()). Every dst[d] + first must be 64-byte
//! aligned. No epilogue. Returns false, having written nothing, where
//! (T, Op) has no vector form or `isa` is `generic`. The caller fences
//! (store_fence).
template <class T, class Op>
inline bool host_stream_fan_lines(host_isa isa, T* const* dst, int ndst, const T* const* src, int nsrc,
                                  std::size_t first, std::size_t lines, const Op& op) {
    (void)op;
#if CHORUS_HOST_SIMD
    constexpr simd_kind K = simd_kind_of<T, Op>();
    if constexpr (K == simd_kind::none) return false;
    else {
        if (isa == host_isa::generic) return false;
        using L = typename simd_lane<T, K>::type;
        L* const* d = reinterpret_cast<L* const*>(dst);
        const L* const* s = reinterpret_cast<const L* const*>(src);
        if (isa == host_isa::avx512) simd_fan_avx512<K>(d, ndst, s, nsrc, first, lines);
        else if (isa == host_isa::avx2) simd_fan_avx2<K>(d, ndst, s, nsrc, first, lines);
        else simd_fan_sse2<K>(d, ndst, s, nsrc, first, lines);
        return true;
    }
#else
    (void)isa, (void)dst, (void)ndst, (void)src, (void)nsrc, (void)first, (void)lines;
    return false;
#endif
}

//! Copies `lines` whole 64-byte lines from src to dst (and dst2) with
//! non-temporal stores at level `isa` (at most the active one, never
//! `generic`); dst and dst2 64-byte aligned, src anywhere. The caller
//! fences (store_fence).
inline void host_stream_copy_lines(host_isa isa, void* dst, void* dst2, const void* src, std::size_t lines) {
#if CHORUS_HOST_SIMD
    using L = unsigned char;
    auto* d = static_cast<L*>(dst);
    auto* d2 = static_cast<L*>(dst2);
    const auto* s = static_cast<const L*>(src);
    const L* none = nullptr;
    simd_lines_dual<simd_kind::none, false, false>(isa, d, d2, s, none, lines, 0);
#else
    (void)isa, (void)dst, (void)dst2, (void)src, (void)lines;
#endif
}

//! Streams `lines` whole 64-byte lines of dst (and dst2) = finish(a op b)
//! (b may be null; finish_n 0: no epilogue) at the active level, from
//! element 0; dst and dst2 must be 64-byte aligned. Returns false, having
//! written nothing, when the pair (T, Op) or this epilogue has no vector
//! form or the level is `generic`: the caller's generic loop does it. A
//! plain copy (b null, no epilogue) has a vector form for every T.
template <class T, class Op>
inline bool host_stream_lines(T* dst, T* dst2, const T* a, const T* b, std::size_t lines, const Op& op,
                              int finish_n) {
    (void)op;
#if CHORUS_HOST_SIMD
    const host_isa isa = host_isa_active();
    if (isa == host_isa::generic) return false;
    if (b == nullptr && (finish_n <= 0 || !has_finish<Op, T>)) { // a copy of bytes, whatever T is
        host_stream_copy_lines(isa, dst, dst2, a, lines);
        return true;
    }
    constexpr simd_kind K = simd_kind_of<T, Op>();
    if constexpr (K == simd_kind::none) return false;
    else {
        using L = typename simd_lane<T, K>::type;
        static_assert(sizeof(L) == sizeof(T));
        auto* d = reinterpret_cast<L*>(dst);
        auto* d2 = reinterpret_cast<L*>(dst2);
        const auto* pa = reinterpret_cast<const L*>(a);
        const auto* pb = reinterpret_cast<const L*>(b);
        if (finish_n > 0 && has_finish<Op, T>) {
            if constexpr (simd_finish_of<T, Op>() && has_finish<Op, T>) {
                if (b != nullptr) simd_lines_dual<K, true, true>(isa, d, d2, pa, pb, lines, finish_n);
                else simd_lines_dual<K, false, true>(isa, d, d2, pa, pb, lines, finish_n);
                return true;
            } else {
                return false;
            }
        }
        simd_lines_dual<K, true, false>(isa, d, d2, pa, pb, lines, 0);
        return true;
    }
#else
    (void)dst, (void)dst2, (void)a, (void)b, (void)lines, (void)finish_n;
    return false;
#endif
}

} // namespace chorus::detail
