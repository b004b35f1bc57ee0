#pragma once
//! \file algo/automatic.hpp
//! Policies that choose for the user.
//!
//! `automatic` (the default policy of every collective) picks, per call,
//! the algorithm the cost model (model/cost.hpp) predicts fastest for this
//! collective, size, rank count and topology: the topology the backend
//! passes in schedule_args::topo (the backends pass model::current(): the
//! file named by CHORUS_MODEL, else their own assumptions; model/file.hpp),
//! else the built-in default topology{}, with ranks_per_node taken
//! from schedule_args::node_size when the backend knows a node split.
//! The choice costs a few predictions of a handful of flops each; a user
//! who names a policy type (ring<>, tree<>, ...) pays nothing for it.
//! Candidates are the order-preserving algorithms, and when the operator
//! is commutative (schedule_args::commutative) also ring<>, tree<> and
//! hierarchical<> (with a node split), so non-commutative operators are
//! safe with the default. All candidates run with their default tuning,
//! chosen per call (resolve_tuning in algo/policy.hpp): on a GPU transport
//! from the size and the channel budget (ring<> at 256 MiB on 8 virtual
//! ranks of an H200: 32 channels, 1 MiB chunks), on the host transports the
//! host values (1 channel). The model's first-order terms do not depend on
//! the channels; a calibrated model file (chorus_calibrate_gpu) carries
//! corrections measured with the per-call tunings the candidates run with.
//!
//! `deterministic<Algo>` guarantees that reductions are bitwise
//! reproducible: for a given rank count every element is reduced as the
//! left fold in rank order 0, 1, ..., n-1 (one fan-in per element), so
//! the result is the same whatever Algo, channel count, chunk size or
//! timing — and the same as a serial loop over the ranks. AllReduce runs
//! direct<> or two_shot<> (the model picks; both fold in rank order),
//! ReduceScatter and Reduce run direct<>, all with Algo's channels and
//! chunk size where Algo has them. The collectives that only copy
//! (AllGather, Broadcast) are exact under any algorithm and run Algo.

#include <cstdint>
#include <cstdio>

#include "../core/config.hpp"
#include "../core/log.hpp"
#include "../model/cost.hpp"
#include "any_schedule.hpp"
#include "policy.hpp"
#include "schedule.hpp"

namespace chorus {

namespace detail {
//! The topology a choice is made against (see the file comment).
inline const model::topology& choice_topology(const schedule_args& a) {
    static constexpr model::topology builtin{};
    return a.topo != nullptr ? *a.topo : builtin;
}
//! Ranks per node for the choice: the backend's node split, else the topology's.
inline int choice_ranks_per_node(const schedule_args& a, const model::topology& t) {
    return a.node_size > 0 ? a.node_size : t.ranks_per_node;
}
//! nccl-tests "size" of a call, in bytes.
constexpr double call_bytes(const schedule_args& a) {
    const bool blocks = a.coll == collective::all_gather || a.coll == collective::reduce_scatter;
    return double(a.count) * double(a.elem_bytes) * (blocks ? double(a.nranks) : 1.0);
}
//! The candidates automatic weighs for this call (see the file comment); returns how many.
inline int auto_candidates(const schedule_args& a, const model::topology& t,
                           model::algorithm (&cand)[model::algorithm_count]) {
    using model::algorithm;
    const bool comm = a.commutative;
    // hierarchical<> over a node split, or on one node where its node
    // phases are the fast path (model::topology::flat_inter: MPI).
    const int L = choice_ranks_per_node(a, t);
    const bool split = L > 0 && a.nranks % L == 0 && (L < a.nranks || (t.flat_inter && L == a.nranks));
    int k = 0;
    cand[k++] = algorithm::direct;
    switch (a.coll) {
    case collective::all_reduce:
        cand[k++] = algorithm::two_shot;
        cand[k++] = algorithm::recursive_doubling;
        cand[k++] = algorithm::rabenseifner;
        if (comm) {
            cand[k++] = algorithm::ring;
            cand[k++] = algorithm::tree;
            if (split) cand[k++] = algorithm::hierarchical;
        }
        break;
    case collective::broadcast:
        cand[k++] = algorithm::ring;
        cand[k++] = algorithm::tree;
        break;
    case collective::reduce:
        if (comm) {
            cand[k++] = algorithm::ring;
            cand[k++] = algorithm::tree;
        }
        break;
    default: // all_gather, reduce_scatter
        if (comm || a.coll == collective::all_gather) cand[k++] = algorithm::ring;
        break;
    }
    return k;
}
//! One choice automatic made, with what it was made for: a repeated call
//! shape (the usual case: the same buckets every step) costs a few
//! comparisons instead of a prediction per candidate. A topology passed
//! in schedule_args::topo must not change while calls use it (the backends
//! own theirs and never change them); as a guard against one that does,
//! an entry also remembers the topology's scalar figures.
struct auto_memo {
    const model::topology* topo = nullptr;
    double figures = 0;
    std::uint64_t bytes_key = 0;
    std::uint64_t scratch_limit = 0;
    int nranks = 0, node_size = 0, channel_budget = 0;
    collective coll = collective::barrier;
    bool commutative = false, in_place = false, valid = false;
    model::algorithm which = model::algorithm::ring;

    static double figures_of(const model::topology& t) {
        return t.intra.latency_s * 1e6 + t.intra.bandwidth_Bps * 1e-9 + t.inter.latency_s * 3e6 +
               t.inter.bandwidth_Bps * 7e-9 + t.reduce_Bps * 1e-10 + t.local_Bps * 3e-10 + t.chunk_bytes +
               t.channels * 17.0 + t.ranks_per_node * 131.0 + t.correction_count * 1021.0 + t.one_shot_bytes +
               t.small_bytes * 1.5e-3 + (t.flat_inter ? 0.5 : 0.0);
    }
    bool matches(const schedule_args& a, const model::topology* t, double f) const {
        return valid && t == topo && a.count * a.elem_bytes == bytes_key && a.nranks == nranks &&
               a.node_size == node_size && a.coll == coll && a.commutative == commutative &&
               a.in_place == in_place && a.scratch_limit_bytes == scratch_limit &&
               a.channel_budget == channel_budget && f == figures;
    }
    //! Which of the 8 entries a call shape uses.
    static unsigned slot(const schedule_args& a) {
        std::uint64_t h = a.count * a.elem_bytes * std::uint64_t{0x9E3779B97F4A7C15u};
        h ^= static_cast<std::uint64_t>(a.coll) * std::uint64_t{0xBF58476D1CE4E5B9u} +
             static_cast<std::uint64_t>(a.nranks) * std::uint64_t{0x94D049BB133111EBu};
        return unsigned(h >> 61);
    }
};
//! The choices one caller remembers (a communicator's, in its
//! schedule_memo): eight call shapes, by auto_memo::slot. Not thread-safe.
struct choice_memo {
    auto_memo entry[8];
    //! The log (CHORUS_DEBUG=INFO): the rank whose calls these are (-1:
    //! unknown; a peer's schedule planned here is not logged), and the call
    //! shapes already shown, so a choice evicted and made again is shown
    //! once (automatic::log_choice).
    int owner = -1;
    std::uint64_t logged[16] = {};
    unsigned logged_next = 0;
};
} // namespace detail

//! The default policy: the model's pick per call (see the file comment).
struct automatic {
    static constexpr direct_params params{1, 256 << 10}; //!< tuning of the exchange collectives
    static constexpr bool reorders_operands = false;     //!< reordering candidates only for commutative operators
    static constexpr bool is_automatic = true;
    static constexpr const char* name = "automatic";
    static constexpr policy describe() { return policy::automatic(); }

    //! The algorithm automatic runs for this call; `memo` (optional)
    //! remembers choices across calls of one caller.
    static model::algorithm choose(const schedule_args& a, detail::choice_memo* memo = nullptr) {
        if (a.nranks <= 1 || a.coll == collective::barrier || is_exchange(a.coll)) return model::algorithm::direct;
        const model::topology& t = detail::choice_topology(a);
        if (memo == nullptr) return pick(a, t);
        const double figures = detail::auto_memo::figures_of(t);
        detail::auto_memo& m = memo->entry[detail::auto_memo::slot(a)];
        if (!m.matches(a, &t, figures)) {
            m = detail::auto_memo{&t,          figures,       a.count * a.elem_bytes, a.scratch_limit_bytes,
                                  a.nranks,    a.node_size,   a.channel_budget,       a.coll,
                                  a.commutative, a.in_place, true,                   pick(a, t)};
            // Where the memo is filled (CHORUS_DEBUG=INFO), once per call shape.
            if (detail::log_enabled(detail::log_level::info)) [[unlikely]]
                log_choice(a, t, m.which, *memo);
        }
        return m.which;
    }

    //! The candidates' predicted times for call `a` against `t`, as text
    //! ("direct 1.2 us, ring 3.4 us (scratch too large), ...") in `buf`.
    static void predictions_text(const schedule_args& a, const model::topology& t, char* buf, std::size_t size) {
        model::algorithm cand[model::algorithm_count]{};
        const int k = detail::auto_candidates(a, t, cand);
        const int rpn = detail::choice_ranks_per_node(a, t);
        const double bytes = detail::call_bytes(a);
        std::size_t used = 0;
        buf[0] = '\0';
        for (int i = 0; i < k && used < size; ++i) {
            const double s = model::predict(a.coll, cand[i], a.nranks, bytes, t, rpn);
            const bool big = s >= 1e-3;
            const int w = std::snprintf(buf + used, size - used, "%s%s %.3g %s%s", i != 0 ? ", " : "",
                                        algorithm_name(cand[i]), big ? s * 1e3 : s * 1e6, big ? "ms" : "us",
                                        fits(cand[i], a) ? "" : " (scratch too large)");
            if (w < 0) break;
            used += static_cast<std::size_t>(w);
        }
    }

    //! Whether a call of policy `p` (automatic, or deterministic<>) runs
    //! with its transport's small-message protocol instead of a schedule:
    //! an AllReduce of at most the topology's small_bytes and of at most
    //! `cap` bytes, the most the transport's protocol carries (0: it has
    //! none). The protocol folds the inputs in rank order, as
    //! deterministic<> requires. A policy the user names runs as named.
    static bool small_message(const policy& p, const schedule_args& a, std::uint64_t cap) {
        if (cap == 0 || !(p.choose || p.deterministic) || a.coll != collective::all_reduce || a.nranks < 2)
            return false;
        const std::uint64_t bytes = a.count * a.elem_bytes;
        return a.elem_bytes <= 64 && bytes <= cap && double(bytes) <= detail::choice_topology(a).small_bytes;
    }

private:
    //! The model's pick among the candidates whose scratch fits.
    static model::algorithm pick(const schedule_args& a, const model::topology& t) {
        using model::algorithm;
        algorithm cand[model::algorithm_count]{};
        int k = detail::auto_candidates(a, t, cand);
        const int rpn = detail::choice_ranks_per_node(a, t);
        const double bytes = detail::call_bytes(a);
        algorithm which = algorithm::direct;
        while (true) {
            which = model::best(a.coll, a.nranks, bytes, t, cand, k, rpn);
            if (k <= 1 || a.scratch_limit_bytes == 0 || fits(which, a)) break;
            int j = 0; // drop the one that does not fit, weigh the rest again
            for (int i = 0; i < k; ++i)
                if (cand[i] != which) cand[j++] = cand[i];
            k = j;
        }
        return which;
    }
    //! The INFO line of a choice: the call shape, the pick, every candidate's prediction.
    [[gnu::cold]] static void log_choice(const schedule_args& a, const model::topology& t, model::algorithm which,
                                         detail::choice_memo& memo) {
        if (memo.owner >= 0 && a.rank != memo.owner) return; // a peer's schedule, planned by this rank
        std::uint64_t key = 0xcbf29ce484222325ull; // FNV-1a over the shape, the topology and the pick
        auto mix = [&key](std::uint64_t v) {
            for (int i = 0; i < 8; ++i) key = (key ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
        };
        mix(a.count * a.elem_bytes);
        mix(std::uint64_t(a.coll) | std::uint64_t(a.commutative) << 8 | std::uint64_t(a.in_place) << 9 |
            std::uint64_t(std::uint32_t(a.nranks)) << 16 | std::uint64_t(std::uint32_t(a.node_size)) << 40);
        mix(a.scratch_limit_bytes);
        mix(reinterpret_cast<std::uintptr_t>(&t));
        mix(std::uint64_t(which));
        for (const std::uint64_t k : memo.logged)
            if (k == key) return;
        memo.logged[memo.logged_next++ % 16] = key;
        char costs[1024];
        predictions_text(a, t, costs, sizeof costs);
        const int rpn = detail::choice_ranks_per_node(a, t);
        char split[48] = "";
        if (rpn > 0 && rpn < a.nranks) std::snprintf(split, sizeof split, " in nodes of %d", rpn);
        detail::log_line(detail::log_level::info, a.rank, a.nranks,
                         "automatic: %s %s (%llu x %llu B), %d ranks%s, %s, %s -> %s; predicted: %s",
                         collective_name(a.coll), detail::bytes_text(std::uint64_t(detail::call_bytes(a))).text,
                         static_cast<unsigned long long>(a.count), static_cast<unsigned long long>(a.elem_bytes),
                         a.nranks, split, a.commutative ? "commutative" : "order-keeping",
                         a.in_place ? "in place" : "out of place", algorithm_name(which), costs);
    }
    static bool fits(model::algorithm which, const schedule_args& a) {
        return a.scratch_limit_bytes == 0 ||
               make_fixed_schedule(policy::fixed(which), a).scratch_elems() * a.elem_bytes <= a.scratch_limit_bytes;
    }
};

namespace detail {
template <class Algo>
constexpr direct_params tuning_of() {
    if constexpr (requires { Algo::params.channels; Algo::params.chunk_bytes; })
        return direct_params{Algo::params.channels, Algo::params.chunk_bytes};
    else
        return direct_params{};
}
} // namespace detail

//! Bitwise-reproducible reductions (see the file comment).
template <class Algo = automatic>
struct deterministic {
    static constexpr direct_params params = detail::tuning_of<Algo>();
    static constexpr bool reorders_operands = false;
    static constexpr const char* name = "deterministic";
    static constexpr policy describe() { return policy_of<Algo>.deterministic_of(); }
};

//! The schedule policy `p` runs for one rank's call `a`: the one dispatch
//! from a policy (and automatic's choice, remembered in `memo` if given) to
//! a schedule.
inline any_schedule make_schedule(const policy& p, const schedule_args& a, detail::choice_memo* memo = nullptr) {
    if (is_exchange(a.coll)) return make_fixed_schedule(p, a);
    // The LL protocol (algo/ll.hpp) for every call it carries: one
    // synchronisation-free shot, folding in rank order (deterministic).
    if ((p.choose || p.deterministic) && ll_fits(a)) return make_ll_schedule(a);
    if (p.deterministic) {
        if (a.coll == collective::all_gather || a.coll == collective::broadcast || a.coll == collective::barrier)
            return p.choose ? make_schedule(policy::automatic(), a, memo) : make_fixed_schedule(p, a);
        bool two = false;
        if (a.coll == collective::all_reduce && a.nranks > 1) {
            const model::algorithm cand[2] = {model::algorithm::direct, model::algorithm::two_shot};
            const model::topology& t = detail::choice_topology(a);
            two = model::best(a.coll, a.nranks, detail::call_bytes(a), t, cand, 2,
                              detail::choice_ranks_per_node(a, t)) == model::algorithm::two_shot;
        }
        // Fields left at 0 (Algo's defaults): on the host the values of the
        // policy Algo names, as before they were chosen per call; on a GPU
        // those of the algorithm that runs.
        const algorithm runs = two ? algorithm::two_shot : algorithm::direct;
        const algorithm named = p.algo == algorithm::hierarchical ? p.intra : p.algo;
        const tuning t = p.choose ? p.tune : resolved_tuning(a.channel_budget > 0 ? runs : named, p.tune, a);
        return make_fixed_schedule(policy::fixed(runs, t), a);
    }
    if (p.choose) return make_fixed_schedule(policy::fixed(automatic::choose(a, memo)), a);
    return make_fixed_schedule(p, a);
}

namespace detail {
//! The last schedule a backend made, for one that plans the same call again
//! and again (the usual case: the same gradient buckets every step): a
//! repeated call costs a comparison instead of a plan (tens of nanoseconds
//! of divisions, a choice for automatic). The exchange collectives are
//! not remembered (their counts may change behind the same pointer).
//! Not thread-safe: one per rank's in-order stream.
class schedule_memo {
public:
    const any_schedule& make(const policy& p, const schedule_args& a) {
        if (!valid_ || !(p == pol_) || !same_args(a, args_) || is_exchange(a.coll)) {
            valid_ = false;
            sch_ = make_schedule(p, a, &choices_);
            pol_ = p;
            args_ = a;
            valid_ = true;
        }
        return sch_;
    }
    //! The choices automatic made for this memo's owner (make() uses them too).
    choice_memo& choices() { return choices_; }

private:
    policy pol_{};
    schedule_args args_{};
    any_schedule sch_{};
    choice_memo choices_{};
    bool valid_ = false;
};
} // namespace detail

//! The schedule policy type Algo runs for one rank's call `a`.
template <class Algo>
any_schedule make_schedule(const schedule_args& a) {
    return make_schedule(policy_of<Algo>, a);
}

} // namespace chorus
