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
//! and the pipelining granularity per channel.
struct tuning {
    int channels = 1;
    std::uint64_t chunk_bytes = 256 << 10;

    constexpr bool operator==(const tuning&) const = default;
};

//! How a policy's data travels. `simple`: the schedule's steps, each
//! read published by a flag of its own (every algorithm). `ll`: the
//! low-latency protocol of the lane executor (GPU communicators): the
//! data is pushed into each reader's LL receive region in 8-byte words
//! that carry 4 data bytes and a 4-byte flag, so a reader polls the data
//! itself (algo/ll.hpp, exec/lane_ll.hpp). Only direct<> has it; a call
//! it cannot carry (too large for the region, element size not 1, 2, 4,
//! 8 or 16 bytes, a backend without the region) runs as `simple`.
enum class protocol : std::uint8_t { simple, ll };

//! The tuning of each policy type's default parameters (ring<>, tree<>, ...).
constexpr tuning default_tuning(algorithm a) {
    switch (a) {
    case algorithm::ring:
    case algorithm::hierarchical: return {1, 256 << 10};
    case algorithm::tree: return {1, 128 << 10};
    default: return {1, 1 << 20}; // direct, recursive_doubling, rabenseifner, two_shot
    }
}

//! What a policy type names, as a value (see the file comment).
struct policy {
    //! automatic: the cost model picks the algorithm per call (with that
    //! algorithm's default tuning); `algo` is then unused.
    bool choose = true;
    //! deterministic<...>: reductions fold in rank order (direct<> or
    //! two_shot<> with `tune`), the copying collectives run the rest.
    bool deterministic = false;
    algorithm algo = algorithm::ring;
    //! The algorithm's tuning; hierarchical: Intra's (every phase's channels);
    //! automatic: the exchange collectives' (1 channel, 256 KiB).
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
    //! One algorithm with its default tuning.
    static constexpr policy fixed(algorithm a) { return fixed(a, default_tuning(a)); }
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
