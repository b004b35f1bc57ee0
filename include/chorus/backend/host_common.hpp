#pragma once
//! \file backend/host_common.hpp
//! What the host backends (threads, mpi) share: the description of one
//! call that ranks compare in checked mode, the default deadline and
//! checked-mode settings, and registered scratch memory.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
#include "../exec/host_kernel.hpp"
#include "transport.hpp"
#include "../ops/traits.hpp"

namespace chorus::detail {

//! What a rank registers for one collective. The buffer pointers are
//! read only by peers that read or write those buffers, which cannot have
//! moved past the collective yet; the signature is read by every peer a
//! rank waits on (possibly while it already moves on), so it lives in
//! atomics under a sequence lock (see sig_slot).
struct descriptor {
    std::uint64_t seq = 0;
    const void* in = nullptr;
    void* out = nullptr;
    void* scratch = nullptr;
    std::uint64_t count = 0;
    std::uint64_t elem_bytes = 0;
    collective coll = collective::barrier;
    int root = 0;
    int channels = 0;
    std::uint64_t type_id = 0; //!< hash of the element type's name
    std::uint64_t op_id = 0;   //!< hash of the operator type's name
    std::uint64_t algo_id = 0; //!< the policy's id() (algorithm and tuning)
    std::uint64_t counts_id = 0; //!< the "v" collectives: hash of the counts array (counts_hash); 0 otherwise
    const char* type_name = "";
    const char* op_name = "";
    const char* algo_name = "";

    bool same_call(const descriptor& o) const {
        return seq == o.seq && coll == o.coll && count == o.count && elem_bytes == o.elem_bytes && root == o.root &&
               channels == o.channels && type_id == o.type_id && op_id == o.op_id && algo_id == o.algo_id &&
               counts_id == o.counts_id;
    }
    //! "all_reduce count 100 of float (4-byte elements), operator sum, root 0, algorithm ring<...>"
    std::string call() const {
        return std::string(collective_name(coll)) + " count " + std::to_string(count) + " of " + type_name + " (" +
               std::to_string(elem_bytes) + "-byte elements), operator " + op_name + ", root " +
               std::to_string(root) + ", algorithm " + algo_name + counts_text();
    }
    //! ", counts #<hash>" for the "v" collectives, empty otherwise.
    std::string counts_text() const {
        if (counts_id == 0) return {};
        static constexpr char hex[] = "0123456789abcdef";
        std::string h = ", counts #";
        for (int i = 60; i >= 0; i -= 4) h += hex[(counts_id >> i) & 0xf];
        return h;
    }
};

//! A printable name of a policy with its tuning, e.g.
//! "ring<channels=2,chunk_bytes=65536>".
inline std::string policy_text(const policy& p) {
    auto one = [](algorithm a, const tuning& t) {
        return std::string(algorithm_name(a)) + "<channels=" + std::to_string(t.channels) +
               ",chunk_bytes=" + std::to_string(t.chunk_bytes) + ">";
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

//! Fills the comparable part of `d` (what checked mode compares) for one
//! call of collective `coll` with element type and operator `t` and policy `p`.
inline void describe_call(descriptor& d, collective coll, std::uint64_t seq, std::uint64_t count, int root,
                          int channels, const call_types& t, const policy& p) {
    d.seq = seq;
    d.count = count;
    d.elem_bytes = t.elem_bytes;
    d.coll = coll;
    d.root = root;
    d.channels = channels;
    d.type_id = t.type_id;
    d.op_id = t.op_id;
    d.algo_id = p.id();
    d.type_name = t.type_name;
    d.op_name = t.op_name;
    d.algo_name = policy_name(p);
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

} // namespace chorus::detail
