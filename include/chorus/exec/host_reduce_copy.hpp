#pragma once
//! \file exec/host_reduce_copy.hpp
//! The host executor's inner loop: v = a op b (or v = a), then the
//! epilogue, stored to dst and, when given, to a second destination dst2
//! (the "reduce, copy and send" of a ring's last reduce-scatter step: one
//! read of the inputs, two writes). Any pointers, any count. For large
//! transfers of 1/2/4/8/16-byte elements on x86-64 the 64-byte aligned
//! interior is written with non-temporal stores (the data is not re-read
//! by this core and would only evict useful lines); the caller issues
//! store_fence() before publishing. Copies, and the built-in operators on
//! arithmetic types, compute each line in vector registers and store it
//! whole at the widest level the CPU has (exec/host_simd.hpp: AVX-512,
//! AVX2 or SSE2, chosen at run time); other pairs go element by element
//! through a 64-byte line buffer and 16-byte stores (the generic loop).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "../ops/traits.hpp"
#include "host_simd.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#  include <emmintrin.h>
#  define CHORUS_HOST_NT 1
#else
#  define CHORUS_HOST_NT 0
#endif

namespace chorus::detail {

//! Orders earlier non-temporal stores before a following release store.
inline void store_fence() {
#if CHORUS_HOST_NT
    _mm_sfence();
#endif
}

//! Element i of the step's result.
template <class T, class Op>
inline T reduced(const T* a, const T* b, std::size_t i, const Op& op, int finish_n) {
    T v = b ? static_cast<T>(op(a[i], b[i])) : a[i];
    return finish_n > 0 ? finish(op, v, finish_n) : v;
}

template <class T, class Op>
inline void reduce_copy_scalar(T* dst, T* dst2, const T* a, const T* b, std::size_t n, const Op& op, int finish_n) {
    if (n == 0) return;
    if (b == nullptr && finish_n == 0) { // a plain copy
        if (dst != a) std::memmove(dst, a, n * sizeof(T));
        if (dst2 != nullptr && dst2 != a) std::memmove(dst2, a, n * sizeof(T));
        return;
    }
    if (dst2 == nullptr) {
        if (b == nullptr)
            for (std::size_t i = 0; i < n; ++i) dst[i] = finish(op, a[i], finish_n);
        else if (finish_n > 0)
            for (std::size_t i = 0; i < n; ++i) dst[i] = finish(op, static_cast<T>(op(a[i], b[i])), finish_n);
        else
            for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(op(a[i], b[i]));
        return;
    }
    for (std::size_t i = 0; i < n; ++i) {
        const T v = reduced(a, b, i, op, finish_n);
        dst[i] = v;
        dst2[i] = v;
    }
}

//! dst[i] (and dst2[i] if dst2) = finish(a[i] op b[i]); b may be null
//! (copy). finish_n > 0 applies the operator's epilogue for that many
//! ranks. `streaming` allows non-temporal stores; the caller fences.
template <class T, class Op>
inline void host_reduce_copy(T* dst, T* dst2, const T* a, const T* b, std::size_t n, const Op& op, int finish_n,
                             bool streaming) {
#if CHORUS_HOST_NT
    constexpr std::size_t line = 64;
    if constexpr (16 % sizeof(T) == 0) {
        const auto addr = reinterpret_cast<std::uintptr_t>(dst);
        const bool same_phase = dst2 == nullptr || (reinterpret_cast<std::uintptr_t>(dst2) - addr) % line == 0;
        if (streaming && same_phase && n * sizeof(T) >= 4 * line && dst != a && addr % sizeof(T) == 0) {
            constexpr std::size_t per = line / sizeof(T);
            const std::size_t head = ((line - addr % line) % line) / sizeof(T);
            reduce_copy_scalar(dst, dst2, a, b, head, op, finish_n);
            std::size_t i = head;
            const std::size_t lines = (n - head) / per;
            if (host_stream_lines(dst + i, dst2 ? dst2 + i : nullptr, a + i, b ? b + i : nullptr, lines, op,
                                  finish_n))
                i += lines * per;
            for (; i + per <= n; i += per) { // the generic loop
                alignas(64) T tmp[per];
                if (b == nullptr && finish_n == 0) {
                    std::memcpy(tmp, a + i, line);
                } else {
                    for (std::size_t j = 0; j < per; ++j) tmp[j] = reduced(a, b, i + j, op, finish_n);
                }
                const auto* s = reinterpret_cast<const __m128i*>(tmp);
                const __m128i v0 = _mm_load_si128(s + 0), v1 = _mm_load_si128(s + 1), v2 = _mm_load_si128(s + 2),
                              v3 = _mm_load_si128(s + 3);
                auto* d = reinterpret_cast<__m128i*>(dst + i);
                _mm_stream_si128(d + 0, v0);
                _mm_stream_si128(d + 1, v1);
                _mm_stream_si128(d + 2, v2);
                _mm_stream_si128(d + 3, v3);
                if (dst2 != nullptr) {
                    auto* d2 = reinterpret_cast<__m128i*>(dst2 + i);
                    _mm_stream_si128(d2 + 0, v0);
                    _mm_stream_si128(d2 + 1, v1);
                    _mm_stream_si128(d2 + 2, v2);
                    _mm_stream_si128(d2 + 3, v3);
                }
            }
            reduce_copy_scalar(dst + i, dst2 ? dst2 + i : nullptr, a + i, b ? b + i : nullptr, n - i, op, finish_n);
            return;
        }
    }
#else
    (void)streaming;
#endif
    reduce_copy_scalar(dst, dst2, a, b, n, op, finish_n);
}

//! The fan-in form: dst[i] (and dst2[i]) = finish(src[0][i] op src[1][i]
//! op ... op src[nsrc-1][i]), combined in source order. Works block by
//! block through a small accumulator, so every source of element i is
//! read before element i is written: dst may be one of the sources.
template <class T, class Op>
inline void host_reduce_fan(T* dst, T* dst2, const T* const* src, int nsrc, std::size_t n, const Op& op,
                            int finish_n) {
    constexpr std::size_t block = sizeof(T) >= 4096 ? 1 : 4096 / sizeof(T);
    alignas(T) unsigned char raw[block * sizeof(T)];
    T* acc = reinterpret_cast<T*>(raw);
    for (std::size_t i0 = 0; i0 < n; i0 += block) {
        const std::size_t m = n - i0 < block ? n - i0 : block;
        for (std::size_t j = 0; j < m; ++j) ::new (static_cast<void*>(acc + j)) T(src[0][i0 + j]);
        for (int q = 1; q < nsrc; ++q) {
            const T* s = src[q] + i0;
            for (std::size_t j = 0; j < m; ++j) acc[j] = static_cast<T>(op(acc[j], s[j]));
        }
        if (finish_n > 0)
            for (std::size_t j = 0; j < m; ++j) acc[j] = finish(op, acc[j], finish_n);
        std::memcpy(static_cast<void*>(dst + i0), acc, m * sizeof(T));
        if (dst2 != nullptr) std::memcpy(static_cast<void*>(dst2 + i0), acc, m * sizeof(T));
    }
}

} // namespace chorus::detail
