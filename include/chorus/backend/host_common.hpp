#pragma once
//! \file backend/host_common.hpp
//! What the host backends (threads, mpi) share: the description of one
//! call that ranks compare in checked mode, the default deadline and
//! checked-mode settings, and registered scratch memory.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../algo/policy.hpp"
#include "../algo/schedule.hpp"
#include "../core/communicator.hpp"
#include "../core/element.hpp"
#include "../core/error.hpp"
#include "../core/signature.hpp"
#include "../exec/host_kernel.hpp"
#include "../ops/traits.hpp"
#include "transport.hpp"

#if defined(__linux__)
#  include <dlfcn.h>
#  include <time.h>
#endif

namespace chorus::detail {

//! The bytes of `count` elements of `elem_bytes` each, for a backend's
//! alloc<T>; errc::invalid_argument (naming `fn`) for 0 or an overflow.
inline std::uint64_t alloc_bytes(std::size_t count, std::size_t elem_bytes, const std::string& fn) {
    if (count == 0) throw error(errc::invalid_argument, fn + ": `count` is 0");
    if (count > std::numeric_limits<std::uint64_t>::max() / elem_bytes)
        throw error(errc::invalid_argument, fn + ": `count` = " + std::to_string(count) + " elements of " +
                                                std::to_string(elem_bytes) + " bytes overflow the size");
    return std::uint64_t(count) * elem_bytes;
}

//! What a rank registers for one collective: its buffers, read only by
//! peers that read or write them (which cannot have moved past the
//! collective yet), and the call's signature (core/signature.hpp) with its
//! names, which every peer a rank waits on compares (the threads transport
//! publishes them apart, under a sequence lock: sig_slot).
struct descriptor {
    call_signature sig{};
    const void* in = nullptr;
    void* out = nullptr;
    void* scratch = nullptr;
    const char* type_name = "";
    const char* op_name = "";
    const char* algo_name = "";

    bool same_call(const descriptor& o) const { return sig.same_call(o.sig); }
    //! "all_reduce count 100 of float (4-byte elements), operator sum, root 0, algorithm ring<...>"
    std::string call() const {
        return std::string(collective_name(sig.coll())) + " count " + std::to_string(sig.count) + " of " +
               type_name + " (" + std::to_string(sig.elem_bytes) + "-byte elements), operator " + op_name +
               ", root " + std::to_string(sig.root()) + ", algorithm " + algo_name + counts_text();
    }
    //! ", counts #<hash>" for the "v" collectives, empty otherwise.
    std::string counts_text() const {
        if (sig.counts_id == 0) return {};
        static constexpr char hex[] = "0123456789abcdef";
        std::string h = ", counts #";
        for (int i = 60; i >= 0; i -= 4) h += hex[(sig.counts_id >> i) & 0xf];
        return h;
    }
};

//! A printable name of a policy with its tuning, e.g.
//! "ring<channels=2,chunk_bytes=65536>".
inline std::string policy_text(const policy& p) {
    auto one = [](algorithm a, const tuning& t) { // 0: chosen per call
        return std::string(algorithm_name(a)) +
               "<channels=" + (t.channels == 0 ? std::string("per-call") : std::to_string(t.channels)) +
               ",chunk_bytes=" + (t.chunk_bytes == 0 ? std::string("per-call") : std::to_string(t.chunk_bytes)) +
               ">";
    };
    std::string s;
    if (p.choose) s = "automatic";
    else if (p.algo == algorithm::hierarchical)
        s = "hierarchical<" + one(p.intra, p.tune) + "," + one(p.inter, p.inter_tune) + ">";
    else s = one(p.algo, p.tune);
    return p.deterministic ? "deterministic<" + s + ">" : s;
}

//! policy_text(p), kept for the life of the process (descriptors that
//! peers read hold the pointer); the last one per thread is remembered,
//! so a repeated call costs a comparison.
inline const char* policy_name(const policy& p) {
    thread_local policy last{};
    thread_local const char* last_name = nullptr;
    if (last_name != nullptr && last == p) return last_name;
    static std::mutex m;
    static std::vector<std::pair<policy, std::unique_ptr<std::string>>> names;
    std::lock_guard<std::mutex> lk(m);
    const char* found = nullptr;
    for (const auto& [q, text] : names)
        if (q == p) found = text->c_str();
    if (found == nullptr) {
        names.emplace_back(p, std::make_unique<std::string>(policy_text(p)));
        found = names.back().second->c_str();
    }
    last = p;
    last_name = found;
    return found;
}

//! A fingerprint of a "v" collective's counts array (FNV-1a over the
//! entries and their number), never 0; 0 stands for "no counts".
inline std::uint64_t counts_hash(const std::uint64_t* counts, std::size_t entries) {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::uint64_t v) {
        for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    };
    mix(entries);
    for (std::size_t i = 0; i < entries; ++i) mix(counts[i]);
    return h == 0 ? 1 : h;
}

//! Scratch memory a rank registers: grown on demand (never per call once
//! large enough), pre-faulted so no collective pays page faults.
class scratch_buffer {
public:
    void* reserve(std::size_t bytes) {
        if (bytes > bytes_) {
            const std::size_t want = bytes < 2 * bytes_ ? 2 * bytes_ : bytes;
            std::unique_ptr<std::byte[]> p(new std::byte[want]);
            std::memset(p.get(), 0, want); // touch every page now
            data_ = std::move(p);
            bytes_ = want;
        }
        return data_.get();
    }
    std::size_t bytes() const noexcept { return bytes_; }

private:
    std::unique_ptr<std::byte[]> data_;
    std::size_t bytes_ = 0;
};

//! The call's fingerprint: a hash of what checked mode compares (count,
//! element type, operator, collective, root, algorithm, the "v" counts),
//! without the sequence number. Ranks compare it on every call, checked
//! mode or not, before they touch anything a peer published (MPI: in the
//! node's shared memory and in every message's tag).
inline std::uint64_t call_fingerprint(const call& c) {
    const std::uint64_t words[] = {c.signature_count,
                                   c.types.elem_bytes,
                                   call_signature::make_shape(c.coll, 0, c.root),
                                   c.types.type_id,
                                   c.types.op_id,
                                   c.pol.id(),
                                   c.counts_id};
    std::uint64_t h = 0x9e3779b97f4a7c15ull;
    for (const std::uint64_t w : words) {
        h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h ^= h >> 31;
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
    }
    return h;
}

//! Whether Op on two T's may throw: a user operator not declared noexcept
//! (the built-in ones are noexcept where T's arithmetic is).
template <class Op, class T>
inline constexpr bool op_may_throw =
    !noexcept(std::declval<const Op&>()(std::declval<const T&>(), std::declval<const T&>()));

//! What an exception says: what() of a std::exception, else a fixed text.
inline std::string exception_text(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "an exception not derived from std::exception";
    }
}

//! The CUDA driver's cuPointerGetAttribute when this process has loaded
//! the driver (libcuda.so.1), else null. chorus never loads it: a process
//! without CUDA pays a look-up (dlopen with RTLD_NOLOAD) at most once a
//! second, and nothing once the driver was found.
using cu_pointer_get_attribute_fn = int (*)(void* data, int attribute, unsigned long long ptr);
inline cu_pointer_get_attribute_fn cuda_driver_pointer_query() noexcept {
#if defined(__linux__)
    static std::atomic<cu_pointer_get_attribute_fn> found{nullptr};
    static std::atomic<std::int64_t> next_look{0};
    if (const auto f = found.load(std::memory_order_acquire)) return f;
    timespec ts{}; // the coarse clock: a few nanoseconds, on every call of a process without CUDA
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    const std::int64_t now = std::int64_t(ts.tv_sec);
    if (now < next_look.load(std::memory_order_relaxed)) return nullptr;
    next_look.store(now + 1, std::memory_order_relaxed);
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD); // kept open: the driver stays loaded anyway
    if (h == nullptr) return nullptr;
    const auto f = reinterpret_cast<cu_pointer_get_attribute_fn>(dlsym(h, "cuPointerGetAttribute"));
    found.store(f, std::memory_order_release);
    return f;
#else
    return nullptr;
#endif
}

//! Throws when `p` is GPU device memory: the host transports (threads, MPI)
//! copy and reduce with the CPU, which cannot read it. Asked of the CUDA
//! driver when the process has loaded it (any translation unit, nvcc's or
//! not); a process without CUDA has no device memory. Managed memory is
//! fine.
inline void check_host_pointer(const char* fn, const char* name, const void* p) {
    if (p == nullptr) return;
    const cu_pointer_get_attribute_fn query = cuda_driver_pointer_query();
    if (query == nullptr) return;
    constexpr int memory_type = 2, is_managed = 8, device_ordinal = 9; // CUpointer_attribute
    constexpr unsigned memory_type_device = 2;                           // CU_MEMORYTYPE_DEVICE
    const auto ptr = static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p));
    unsigned type = 0;
    if (query(&type, memory_type, ptr) != 0 || type != memory_type_device) return; // not CUDA's, or host memory
    unsigned long long managed = 0; // a boolean of the driver's size, whatever it is
    if (query(&managed, is_managed, ptr) == 0 && managed != 0) return;
    int device = -1;
    (void)query(&device, device_ordinal, ptr);
    throw error(errc::invalid_argument, std::string("chorus::") + fn + ": `" + name +
                                            "` points to GPU memory (device " + std::to_string(device) +
                                            "); a host communicator (threads, MPI) needs host or managed memory");
}
//! check_host_pointer for a collective's buffers (`buf` for a broadcast).
inline void check_host_buffers(collective coll, const void* in, const void* out) {
    const bool bcast = coll == collective::broadcast;
    check_host_pointer(collective_name(coll), bcast ? "buf" : "in", in);
    check_host_pointer(collective_name(coll), bcast ? "buf" : "out", out);
}

//! What a rank that found a peer's call differs from its own says.
inline std::string different_call_text(int peer) {
    return "rank " + std::to_string(peer) +
           " made a different call from this rank's (count, element type, operator, root or algorithm)";
}
//! The message of a mismatch found with checked mode off (by the ranks
//! that notice it; the others fail as the communicator aborts).
inline std::string mismatch_text(const std::string& what) {
    return what + "; checked mode is off (comm.set_checked(true) or CHORUS_CHECK=1 reports every rank's call)";
}

//! Fills the comparable part of `d` (what checked mode compares) for call
//! `c` run on `channels` channels.
inline void describe_call(descriptor& d, const call& c, int channels) {
    d.sig = signature_of(c, channels, c.pol.id());
    d.sig.seq = c.seq;
    d.type_name = c.types.type_name;
    d.op_name = c.types.op_name;
    d.algo_name = policy_name(c.pol);
}

//! The same text on every rank: which ranks called what, grouping ranks
//! that made the same call ("rank 0, 2 called ...; rank 1 called ...").
inline std::string calls_report(std::uint64_t seq, const std::vector<descriptor>& calls) {
    const int n = static_cast<int>(calls.size());
    std::string report = "collective #" + std::to_string(seq) + " on this communicator was called differently: ";
    for (int r = 0; r < n; ++r) {
        const descriptor& d = calls[static_cast<std::size_t>(r)];
        bool first = true;
        for (int q = 0; q < r && first; ++q) first = !calls[static_cast<std::size_t>(q)].same_call(d);
        if (!first) continue;
        std::string ranks;
        int k = 0;
        for (int q = r; q < n; ++q)
            if (calls[static_cast<std::size_t>(q)].same_call(d)) {
                ranks += (k++ ? ", " : "") + std::to_string(q);
            }
        report += (r ? "; " : "") + std::string(k > 1 ? "ranks " : "rank ") + ranks + " called " + d.call();
    }
    return report;
}

//! A call with its names as text, of fixed size: what ranks of different
//! processes can read of each other's calls (MPI's checked mode exchanges
//! it; the small-message protocol's boxes hold it, backend/host_small.hpp).
//! Longer names are cut.
struct call_text {
    call_signature sig;
    char type_name[48], op_name[48], algo_name[96];

    //! Up to n - 1 characters of src and a terminator (the rest of dst untouched).
    static void copy(char* dst, std::size_t n, const char* src) {
        std::size_t k = 0;
        for (; src != nullptr && src[k] != '\0' && k + 1 < n; ++k) dst[k] = src[k];
        dst[k] = '\0';
    }
    //! Rewrites this record in place (a box's, on every call: no padding written).
    void set(const descriptor& d) {
        sig = d.sig;
        copy(type_name, sizeof type_name, d.type_name);
        copy(op_name, sizeof op_name, d.op_name);
        copy(algo_name, sizeof algo_name, d.algo_name);
    }
    static call_text of(const descriptor& d) {
        call_text s{};
        s.set(d);
        return s;
    }
    descriptor to_descriptor() const {
        descriptor d{};
        d.sig = sig;
        d.type_name = type_name;
        d.op_name = op_name;
        d.algo_name = algo_name;
        return d;
    }
};

} // namespace chorus::detail
