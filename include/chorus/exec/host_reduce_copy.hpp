#pragma once
//! \file exec/host_reduce_copy.hpp
//! The host executor's inner loop: dst = a op b (or dst = a), then the
//! epilogue. Any pointers, any count. For large transfers of 1/2/4/8/16-byte
//! elements on x86-64 the 16-byte aligned interior of dst is written with
//! non-temporal stores (the data is not re-read soon and would only evict
//! useful lines); the caller issues store_fence() before publishing.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../ops/traits.hpp"

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

template <class T, class Op>
inline void reduce_copy_scalar(T* dst, const T* a, const T* b, std::size_t n, const Op& op, int finish_n) {
    if (b == nullptr) {
        if (finish_n > 0) {
            for (std::size_t i = 0; i < n; ++i) dst[i] = finish(op, a[i], finish_n);
        } else if (dst != a && n != 0) {
            std::memmove(dst, a, n * sizeof(T));
        }
        return;
    }
    if (finish_n > 0)
        for (std::size_t i = 0; i < n; ++i) dst[i] = finish(op, static_cast<T>(op(a[i], b[i])), finish_n);
    else
        for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(op(a[i], b[i]));
}

//! dst[i] = finish(a[i] op b[i]) (b may be null: dst[i] = finish(a[i])).
//! finish_n > 0 applies the operator's epilogue for that many ranks.
//! `streaming` allows non-temporal stores; the caller fences.
template <class T, class Op>
inline void host_reduce_copy(T* dst, const T* a, const T* b, std::size_t n, const Op& op, int finish_n,
                             bool streaming) {
#if CHORUS_HOST_NT
    constexpr std::size_t line = 64;
    if constexpr (16 % sizeof(T) == 0) {
        if (streaming && n * sizeof(T) >= 4 * line && dst != a) {
            std::size_t head = 0;
            const auto addr = reinterpret_cast<std::uintptr_t>(dst);
            if (addr % sizeof(T) == 0) {
                head = ((line - addr % line) % line) / sizeof(T);
                constexpr std::size_t per = line / sizeof(T);
                reduce_copy_scalar(dst, a, b, head, op, finish_n);
                std::size_t i = head;
                for (; i + per <= n; i += per) {
                    alignas(64) T tmp[per];
                    if (b == nullptr) {
                        for (std::size_t j = 0; j < per; ++j) tmp[j] = finish_n > 0 ? finish(op, a[i + j], finish_n) : a[i + j];
                    } else {
                        for (std::size_t j = 0; j < per; ++j) {
                            T v = static_cast<T>(op(a[i + j], b[i + j]));
                            tmp[j] = finish_n > 0 ? finish(op, v, finish_n) : v;
                        }
                    }
                    auto* d = reinterpret_cast<__m128i*>(dst + i);
                    const auto* s = reinterpret_cast<const __m128i*>(tmp);
                    _mm_stream_si128(d + 0, _mm_load_si128(s + 0));
                    _mm_stream_si128(d + 1, _mm_load_si128(s + 1));
                    _mm_stream_si128(d + 2, _mm_load_si128(s + 2));
                    _mm_stream_si128(d + 3, _mm_load_si128(s + 3));
                }
                reduce_copy_scalar(dst + i, a + i, b ? b + i : nullptr, n - i, op, finish_n);
                return;
            }
        }
    }
#else
    (void)streaming;
#endif
    reduce_copy_scalar(dst, a, b, n, op, finish_n);
}

} // namespace chorus::detail
