#pragma once
//! \file core/nvtx.hpp
//! NVTX ranges around collectives, for Nsight Systems and other NVTX tools
//! (docs/observability.md). Compiled in where CHORUS_NVTX is 1 (config.hpp:
//! <nvtx3/nvToolsExt.h>, header-only and part of the CUDA toolkit, is on
//! the include path, unless the build defines CHORUS_NVTX=0); otherwise
//! every call here is empty.
//!
//! A range lives in the domain "chorus"; its message is a registered
//! string "<collective> <algorithm> <k>ch" (e.g. "all_reduce ring 2ch";
//! the algorithm is what ran: automatic's pick, "small", "exchange"), its
//! category the algorithm (named categories: "ring", "small", ...), its
//! payload the call's bytes (uint64, the nccl-tests size) and its color
//! the collective's. Strings are registered on first use, so a call formats
//! nothing. Without a tool attached NVTX makes no domain, and the only cost
//! of a call is the test nvtx_range::active() makes (a load and a compare).

#include <atomic>
#include <cstdint>
#include <string_view>

#include "collective.hpp"
#include "config.hpp"

#if CHORUS_NVTX
#  include <nvtx3/nvToolsExt.h>
#  include <cstdio>
#endif

namespace chorus::detail {

//! What ran, as an index into the range names: the algorithms (by their
//! value), then the small-message protocol and the exchange schedule.
inline constexpr int nvtx_small = algorithm_count;
inline constexpr int nvtx_exchange = algorithm_count + 1;
inline constexpr int nvtx_kinds = algorithm_count + 2;
inline constexpr int nvtx_collectives = int(collective::all_to_allv) + 1;

inline constexpr const char* nvtx_kind_name(int k) {
    if (k == nvtx_small) return "small";
    if (k == nvtx_exchange) return "exchange";
    if (k >= 0 && k < algorithm_count) return algorithm_name(all_algorithms[k]);
    return "?";
}
//! The index of a what-ran name (algorithm_name, "small", "exchange"); -1 if none.
inline int nvtx_kind_of(const char* name) {
    const std::string_view n = name != nullptr ? name : "";
    for (int k = 0; k < nvtx_kinds; ++k)
        if (n == nvtx_kind_name(k)) return k;
    return -1;
}

//! Whether a tool listens, cached for nvtx_range::active(): -1 unknown
//! (nvtx() not made yet), 0 no, 1 yes.
inline std::atomic<int> nvtx_listening{-1};

#if CHORUS_NVTX

//! The domain and the registered strings (made on first use).
class nvtx_state {
public:
    nvtx_state() {
        domain_ = nvtxDomainCreateA("chorus");
        if (domain_ != nullptr) // else no tool is attached: nothing else is ever called
            for (int k = 0; k < nvtx_kinds; ++k)
                nvtxDomainNameCategoryA(domain_, std::uint32_t(k + 1), nvtx_kind_name(k));
        nvtx_listening.store(domain_ != nullptr ? 1 : 0, std::memory_order_release);
    }
    nvtxDomainHandle_t domain() const noexcept { return domain_; }
    //! The registered message of (collective, kind, channels).
    nvtxStringHandle_t name(collective c, int kind, int channels) {
        std::atomic<nvtxStringHandle_t>& slot = names_[int(c)][kind][channels - 1];
        nvtxStringHandle_t h = slot.load(std::memory_order_acquire);
        if (h == nullptr) { // two threads may both register it: the same text, either handle will do
            char text[96];
            std::snprintf(text, sizeof text, "%s %s %dch", collective_name(c), nvtx_kind_name(kind), channels);
            h = nvtxDomainRegisterStringA(domain_, text);
            slot.store(h, std::memory_order_release);
        }
        return h;
    }

private:
    nvtxDomainHandle_t domain_ = nullptr;
    std::atomic<nvtxStringHandle_t> names_[nvtx_collectives][nvtx_kinds][max_channels]{};
};

inline nvtx_state& nvtx() {
    static nvtx_state s;
    return s;
}

//! Makes the NVTX state (first use): whether a tool listens.
[[gnu::cold]] CHORUS_NOINLINE inline bool nvtx_probe() { return nvtx().domain() != nullptr; }

//! One color per collective (ARGB).
inline constexpr std::uint32_t nvtx_colors[nvtx_collectives] = {0xff76b900, 0xff1f77b4, 0xffff7f0e, 0xff9467bd,
                                                                 0xff8c564b, 0xff7f7f7f, 0xffd62728, 0xff17becf,
                                                                 0xffe377c2, 0xffbcbd22};
#endif

//! An NVTX range for a scope, pushed by push() (nothing when no tool is
//! attached, or without CHORUS_NVTX) and popped when the object goes.
class nvtx_range {
public:
    nvtx_range() = default;
    nvtx_range(const nvtx_range&) = delete;
    nvtx_range& operator=(const nvtx_range&) = delete;
    ~nvtx_range() {
#if CHORUS_NVTX
        if (domain_ != nullptr) nvtxDomainRangePop(domain_);
#endif
    }

    //! Whether a tool listens (what a call pays when none does).
    static bool active() noexcept {
#if CHORUS_NVTX
        const int v = nvtx_listening.load(std::memory_order_relaxed);
        if (v < 0) [[unlikely]]
            return nvtx_probe();
        return v != 0;
#else
        return false;
#endif
    }

    //! Opens the range "<c> <kind> <channels>ch" with `bytes` as payload
    //! (once per object; kind as nvtx_kind_of, channels clamped to 1..max_channels).
    void push(collective c, int kind, int channels, std::uint64_t bytes) {
#if CHORUS_NVTX
        if (!active() || domain_ != nullptr) return;
        if (kind < 0 || kind >= nvtx_kinds || int(c) >= nvtx_collectives) return;
        channels = channels < 1 ? 1 : channels > max_channels ? max_channels : channels;
        nvtx_state& s = nvtx();
        nvtxEventAttributes_t e{};
        e.version = NVTX_VERSION;
        e.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        e.category = std::uint32_t(kind + 1);
        e.colorType = NVTX_COLOR_ARGB;
        e.color = nvtx_colors[int(c)];
        e.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
        e.payload.ullValue = bytes;
        e.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        e.message.registered = s.name(c, kind, channels);
        domain_ = s.domain();
        nvtxDomainRangePushEx(domain_, &e);
#else
        (void)c;
        (void)kind;
        (void)channels;
        (void)bytes;
#endif
    }

private:
#if CHORUS_NVTX
    nvtxDomainHandle_t domain_ = nullptr;
#endif
};

} // namespace chorus::detail
