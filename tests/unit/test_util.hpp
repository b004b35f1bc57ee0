#pragma once
//! Helpers shared by the collective, async and error tests: sanitizer
//! detection, a buffer with guard bytes around a (misaligned) span, a
//! thread-safe failure log that rank threads write and the test thread
//! reports, and small timing / string helpers.

#include <doctest/doctest.h>

#include <chorus/chorus.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#  define CHORUS_TEST_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define CHORUS_TEST_TSAN 1
#  endif
#endif
#if !defined(CHORUS_TEST_TSAN)
#  define CHORUS_TEST_TSAN 0
#endif

namespace chorus_test {

inline constexpr bool under_tsan = CHORUS_TEST_TSAN != 0;

using steady = std::chrono::steady_clock;

inline double seconds_since(steady::time_point t0) {
    return std::chrono::duration<double>(steady::now() - t0).count();
}

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

//! A vector of `off + len + guard` elements whose every byte starts as
//! `fill`; span() is the `len` elements at `off`. guards_intact() checks that
//! nothing outside the span was written.
template <class T>
class guarded {
public:
    static constexpr unsigned char default_fill = 0xA5;

    guarded(std::size_t len, std::size_t off, std::size_t guard = 3, unsigned char fill = default_fill)
        : store_(off + len + guard), off_(off), len_(len), fill_(fill) {
        static_assert(std::is_trivially_copyable_v<T>);
        std::memset(static_cast<void*>(store_.data()), fill_, store_.size() * sizeof(T));
    }
    std::span<T> span() { return {store_.data() + off_, len_}; }
    std::span<const T> cspan() const { return {store_.data() + off_, len_}; }
    std::size_t size() const { return len_; }
    T& operator[](std::size_t i) { return store_[off_ + i]; }
    const T& operator[](std::size_t i) const { return store_[off_ + i]; }

    //! Index (in element units of the whole store) of the first clobbered guard byte's element, or -1.
    long long first_bad_guard() const {
        const auto* b = reinterpret_cast<const unsigned char*>(store_.data());
        const std::size_t lo = off_ * sizeof(T), hi = (off_ + len_) * sizeof(T), all = store_.size() * sizeof(T);
        for (std::size_t i = 0; i < lo; ++i)
            if (b[i] != fill_) return static_cast<long long>(i / sizeof(T));
        for (std::size_t i = hi; i < all; ++i)
            if (b[i] != fill_) return static_cast<long long>(i / sizeof(T));
        return -1;
    }
    bool guards_intact() const { return first_bad_guard() < 0; }
    //! True when element i of the span still holds the fill pattern.
    bool untouched(std::size_t i) const {
        const auto* b = reinterpret_cast<const unsigned char*>(&store_[off_ + i]);
        for (std::size_t j = 0; j < sizeof(T); ++j)
            if (b[j] != fill_) return false;
        return true;
    }

private:
    std::vector<T> store_;
    std::size_t off_, len_;
    unsigned char fill_;
};

template <class T>
bool same_bits(const T& a, const T& b) {
    return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
std::string show(const T& v) {
    if constexpr (std::is_floating_point_v<T>) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
        return buf;
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
        return std::to_string(static_cast<long long>(v));
    } else if constexpr (std::is_integral_v<T>) {
        return std::to_string(static_cast<unsigned long long>(v));
    } else {
        std::string s = "0x";
        const auto* b = reinterpret_cast<const unsigned char*>(&v);
        char buf[4];
        for (std::size_t i = 0; i < sizeof(T); ++i) {
            std::snprintf(buf, sizeof buf, "%02x", b[i]);
            s += buf;
        }
        return s;
    }
}

//! Failures seen by rank threads (doctest's CHECK is best used from the test
//! thread); report() turns them into doctest failures.
class failure_log {
public:
    void add(const std::string& what) {
        std::lock_guard<std::mutex> lk(m_);
        ++count_;
        if (msgs_.size() < max_kept) msgs_.push_back(what);
    }
    std::size_t count() const {
        std::lock_guard<std::mutex> lk(m_);
        return count_;
    }
    //! Call from the test thread.
    void report() const {
        std::lock_guard<std::mutex> lk(m_);
        for (const auto& s : msgs_) FAIL_CHECK(s);
        if (count_ > msgs_.size()) FAIL_CHECK("... and " << (count_ - msgs_.size()) << " more failures");
        CHECK(count_ == 0);
    }

private:
    static constexpr std::size_t max_kept = 12;
    mutable std::mutex m_;
    std::vector<std::string> msgs_;
    std::size_t count_ = 0;
};

//! A policy value and the name the failure messages use.
struct named_policy {
    const char* name;
    chorus::policy pol;
};

//! The affine map t -> a*t + b on 32-bit unsigned integers (wrapping) under
//! composition: associative, not commutative, exact in any association, so
//! a result equal to the rank-order fold shows that operand order was kept.
struct affine {
    std::uint32_t a, b;
};
struct compose_op {
    static constexpr bool commutative = false;
    static constexpr const char* name = "compose";
    affine operator()(const affine& x, const affine& y) const { return {x.a * y.a, x.a * y.b + x.b}; }
};

} // namespace chorus_test
