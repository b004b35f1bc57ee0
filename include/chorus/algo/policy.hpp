#pragma once
//! \file algo/policy.hpp
//! An algorithm policy as a value. Policy types (ring<...>, direct<...>,
//! hierarchical<...>, automatic, deterministic<...>) are how users choose
//! at compile time; each one describes itself as a `policy` (policy_of<Algo>),
//! and everything below the public API works with that value: one
//! executor, one kernel per (element type, operator) serves every
//! algorithm, and the choice of algorithm costs no instantiation.
//!
//! A policy value can also be made at run time (tests iterate over them,
//! benchmarks parse them from the command line); check_policy() then
//! refuses what the policy types refuse with a static_assert.

#include <concepts>
#include <cstdint>
#include <string_view>

#include "../core/collective.hpp"
#include "../core/config.hpp"

namespace chorus {

//! An algorithm's tuning knobs: independent channels (GPU thread blocks)
//! and the pipelining granularity per channel. A 0 in either field means
//! "chosen per call" (resolve_tuning below): what the policy types' default
//! parameters (ring<>, direct<>, ...) hold. A value the user gives is used
//! exactly as given.
struct tuning {
    int channels = 1;
    std::uint64_t chunk_bytes = 256 << 10;

    constexpr bool operator==(const tuning&) const = default;
};

//! The tuning a policy type's default parameters hold: everything chosen per call.
inline constexpr tuning per_call_tuning{0, 0};

//! How a policy's data travels. `simple`: the schedule's steps, each
//! read published by a flag of its own (every algorithm). `ll`: the
//! low-latency protocol of the lane executor (GPU communicators): the
//! data is pushed into each reader's LL receive region in 8-byte words
//! that carry 4 data bytes and a 4-byte flag, so a reader polls the data
//! itself (algo/ll.hpp, exec/lane_ll.hpp). Only direct<> has it; a call
//! it cannot carry (too large for the region, element size not 1, 2, 4,
//! 8 or 16 bytes, a backend without the region) runs as `simple`.
enum class protocol : std::uint8_t { simple, ll };

//! What a 0 (per call) field of algorithm `a`'s tuning becomes on the host
//! transports (threads, shm, MPI): the values the policy types' defaults
//! held before they were chosen per call, so host results and host
//! benchmarks do not change.
constexpr tuning host_tuning(algorithm a) {
    switch (a) {
    case algorithm::ring:
    case algorithm::hierarchical: return {1, 256 << 10};
    case algorithm::tree: return {1, 128 << 10};
    default: return {1, 1 << 20}; // direct, recursive_doubling, rabenseifner, two_shot
    }
}

// --- per-call tuning on GPU transports ----------------------------------------
//
// A GPU transport gives every call its channel budget (schedule_args::
// channel_budget): the channels one rank may use with every rank's blocks
// on a device resident at once (backend/gpu.hpp: collective_min_blocks_per_sm
// x the fewest SMs of the world's devices / the most ranks on one device,
// at most max_channels). A 0 field is then chosen from the call's size, the
// rank count and that budget: the same inputs on every rank, so every rank
// resolves alike. The rule comes from the H200 measurements of docs/gpu.md
// ("Per-call defaults"), 8 virtual ranks:
//   - direct<> AllReduce at 64 KiB: 4 channels 25.4 us, 1 channel 30.8 us;
//     below 16 KiB 1..4 channels are alike (23.5 us): a channel pays from
//     about 16 KiB of its rank's work (gpu_channel_work_bytes);
//   - ring<> AllReduce at 256 MiB: 32 channels / 1 MiB chunks 0.763 of copy
//     bandwidth, 16 / 1 MiB 0.600, 32 / 256 KiB 0.590, 16 / 256 KiB 0.472:
//     as many channels as fit, and 1 MiB chunks (fewer, larger steps) beat
//     256 KiB (gpu_chunk_bytes).
// So: channels = the largest power of two <= (a rank's work) / 16 KiB,
// clamped to 1 .. budget; chunk_bytes = 1 MiB for AllReduce, AllGather and
// ReduceScatter (a channel's slice below 1 MiB is one chunk), and the host
// value for the pipelined chains (Broadcast, Reduce, tree<>), whose depth
// the chunk count sets. A rank's work: ring<>, two_shot<>, rabenseifner<>
// and hierarchical<> split the buffer over the ranks (bytes / n); direct<>,
// recursive_doubling<> and tree<> handle the whole buffer on every rank.
// The exchange collectives (all_to_all, the "v" ones) keep the host values.

//! A channel pays from this much of its rank's work (see above).
inline constexpr std::uint64_t gpu_channel_work_bytes = 16 << 10;
//! Chunk size per call on GPU transports (see above).
inline constexpr std::uint64_t gpu_chunk_bytes = 1 << 20;

//! The channels a 0 field resolves to on a GPU transport: `bytes` is the
//! call's nccl-tests size, `budget` the transport's channel budget (>= 1).
constexpr int gpu_channels(algorithm a, std::uint64_t bytes, int nranks, int budget) {
    const bool split = a == algorithm::ring || a == algorithm::two_shot || a == algorithm::rabenseifner ||
                       a == algorithm::hierarchical;
    const std::uint64_t work = split && nranks > 1 ? bytes / std::uint64_t(nranks) : bytes;
    const int cap = budget < 1 ? 1 : budget > max_channels ? max_channels : budget;
    int ch = 1;
    while (ch * 2 <= cap && work >= std::uint64_t(ch) * 2 * gpu_channel_work_bytes) ch *= 2;
    return ch;
}

//! Tuning `given` of algorithm `a` for one call: its 0 fields chosen per
//! call (see above), the others kept. `budget` 0: a host transport (the
//! host values); `bytes`: the call's nccl-tests size.
constexpr tuning resolve_tuning(algorithm a, tuning given, collective c, std::uint64_t bytes, int nranks,
                                int budget) {
    if (given.channels > 0 && given.chunk_bytes > 0) return given;
    const tuning host = host_tuning(a);
    tuning t = given;
    if (budget <= 0 || is_exchange(c)) {
        if (t.channels <= 0) t.channels = host.channels;
        if (t.chunk_bytes == 0) t.chunk_bytes = host.chunk_bytes;
        return t;
    }
    if (t.channels <= 0) t.channels = gpu_channels(a, bytes, nranks, budget);
    if (t.chunk_bytes == 0) {
        const bool chain = a == algorithm::tree || c == collective::broadcast || c == collective::reduce;
        t.chunk_bytes = chain ? host.chunk_bytes : gpu_chunk_bytes;
    }
    return t;
}

//! What a policy type names, as a value (see the file comment).
struct policy {
    //! automatic: the cost model picks the algorithm per call (with that
    //! algorithm's default tuning, chosen per call); `algo` is then unused.
    bool choose = true;
    //! deterministic<...>: reductions fold in rank order (direct<> or
    //! two_shot<> with `tune`), the copying collectives run the rest.
    bool deterministic = false;
    algorithm algo = algorithm::ring;
    //! The algorithm's tuning (0 fields: chosen per call, resolve_tuning);
    //! hierarchical: Intra's (every phase's channels); automatic: the
    //! exchange collectives' (1 channel, 256 KiB).
    tuning tune{1, 256 << 10};
    //! hierarchical only: the algorithms inside a node and between nodes
    //! (ring or direct), and Inter's tuning (its chunk size).
    algorithm intra = algorithm::ring;
    algorithm inter = algorithm::ring;
    tuning inter_tune{1, 256 << 10};
    //! direct<> only: the protocol (protocol::ll: the low-latency one).
    protocol proto = protocol::simple;

    constexpr bool operator==(const policy&) const = default;

    //! One algorithm with its tuning.
    static constexpr policy fixed(algorithm a, tuning t) {
        policy p{};
        p.choose = false;
        p.algo = a;
        p.tune = t;
        if (a == algorithm::hierarchical) p.inter_tune = t;
        return p;
    }
    //! One algorithm with its default tuning (chosen per call).
    static constexpr policy fixed(algorithm a) { return fixed(a, per_call_tuning); }
    //! hierarchical<Intra, Inter>.
    static constexpr policy hierarchical(algorithm intra, tuning intra_tune, algorithm inter, tuning inter_tune) {
        policy p = fixed(algorithm::hierarchical, intra_tune);
        p.intra = intra;
        p.inter = inter;
        p.inter_tune = inter_tune;
        return p;
    }
    //! automatic.
    static constexpr policy automatic() { return policy{}; }
    //! deterministic<Algo> of the policy Algo names.
    constexpr policy deterministic_of() const {
        policy p = *this;
        p.deterministic = true;
        return p;
    }

    //! True when the policy may combine operands out of rank order (then
    //! the operator must be commutative): ring<>, tree<>, hierarchical<>.
    constexpr bool reorders_operands() const {
        return !choose && !deterministic &&
               (algo == algorithm::ring || algo == algorithm::tree || algo == algorithm::hierarchical);
    }

    //! A fingerprint the ranks compare on first contact and in checked mode
    //! (a mix of the fields that matter, a few multiplications: it is taken
    //! on every call): equal policies give equal ids in every process.
    constexpr std::uint64_t id() const {
        auto mix = [](std::uint64_t h, std::uint64_t v) { // splitmix64 of h ^ v
            std::uint64_t x = h ^ v;
            x += 0x9E3779B97F4A7C15ull;
            x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
            x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
            return x ^ (x >> 31);
        };
        const bool hier = !choose && algo == algorithm::hierarchical;
        const std::uint64_t head = std::uint64_t(choose) | std::uint64_t(deterministic) << 1 |
                                   std::uint64_t(choose ? 0xff : unsigned(algo)) << 8 |
                                   std::uint64_t(hier ? unsigned(intra) : 0xff) << 16 |
                                   std::uint64_t(hier ? unsigned(inter) : 0xff) << 24 |
                                   std::uint64_t(std::uint32_t(tune.channels)) << 32;
        std::uint64_t h = mix(mix(0x63686f727573ull, head), tune.chunk_bytes);
        if (hier) h = mix(mix(h, std::uint64_t(std::uint32_t(inter_tune.channels))), inter_tune.chunk_bytes);
        if (proto != protocol::simple) h = mix(h, 0x6c6c00ull | std::uint64_t(proto));
        return h;
    }
};

//! The policy a name spells, with default tuning: an algorithm's name
//! (policy_of<ring<>>, ..., policy_of<hierarchical<>>), "automatic" or
//! "deterministic" (deterministic<>, which is deterministic<automatic>);
//! false if none. For command lines and environment variables.
constexpr bool policy_from_name(std::string_view name, policy& out) {
    if (name == "automatic") {
        out = policy::automatic();
        return true;
    }
    if (name == "deterministic") {
        out = policy::automatic().deterministic_of();
        return true;
    }
    if (name == "direct_ll") { // direct<direct_params{.proto = protocol::ll}>
        out = policy::fixed(algorithm::direct);
        out.proto = protocol::ll;
        return true;
    }
    algorithm a{};
    if (!algorithm_from_name(name, a)) return false;
    out = policy::fixed(a);
    return true;
}

//! The names policy_from_name knows, in the order benchmarks list them.
inline constexpr const char* policy_names[] = {"ring",         "direct",   "tree",         "recursive_doubling",
                                               "rabenseifner", "two_shot", "hierarchical", "automatic",
                                               "deterministic"};

namespace detail {
//! What a policy type provides: its parameters, whether it may reorder
//! operands, and the policy value it names.
template <class Algo>
concept algorithm_policy = requires {
    Algo::params;
    { Algo::reorders_operands } -> std::convertible_to<bool>;
    { Algo::describe() } -> std::same_as<policy>;
};
} // namespace detail

//! The value a policy type describes itself as (Algo::describe()).
template <class Algo>
inline constexpr policy policy_of = Algo::describe();

} // namespace chorus
