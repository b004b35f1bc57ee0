#pragma once
//! \file tests/unit/schedule_sim.hpp
//! The schedule simulator of the unit tests (test_schedule.cpp: every
//! policy's any_schedule; test_exchange.cpp: the exchange schedule). No
//! threads: every rank's real units (any_schedule::unit) run one at a time
//! under the executors' real wait rules, in random interleavings, over
//! symbolic elements that record which ranks' inputs each element absorbed,
//! how often, and the epilogues applied.
//!
//! What it models, as the executors do it:
//!   * An actor per (rank, channel), with its own progress flag: "registered"
//!     (the flag's collective number), then "p units done" after unit p.
//!     An actor first registers, then runs its units in order, each once
//!     its waits are satisfied (exec/rank_program.hpp: run_unit), then
//!     waits for the schedule's final_wait() on its channel (finish_channel).
//!     A rank returns once every one of its channels has.
//!   * channel_order::independent is the GPU executor (exec/lane_env.hpp:
//!     run_lane_channel, one thread block per channel): each channel
//!     registers on its own (its own descriptor, read by peers through the
//!     same channel) and runs whenever its own waits allow, whatever the
//!     rank's other channels do; a wait with every_channel waits on each
//!     channel of the group and on the rank's own other channels.
//!   * channel_order::interleaved is the host executors (threads, MPI:
//!     run_rank_interleaved): a rank registers every channel at once, runs
//!     unit p of channel c as its (p * channels + c)-th unit, and an
//!     every_channel wait names only the waiting channel (the order gives
//!     the rest).
//!   * A wait_spec is read exactly as wait_on_channel reads it: span <= 1
//!     is the single rank `peer` (no wait when that is the waiting rank),
//!     span > 1 the ranks peer + i * stride, i < span, skipping the waiting
//!     rank; a wait for u units of rank q on channel c needs q's channel c
//!     registered and at least u of its units done.
//! What it checks, at every state it passes through:
//!   * any two units that could run now (enabled) of different actors,
//!     two channels of one rank included, touch no element that either
//!     writes;
//!   * no unit that could run now touches a buffer of a rank that has not
//!     registered it (on the unit's channel: that is the descriptor the
//!     GPU reads) or that has returned;
//!   * a unit writes only its own rank's buffers (a push to dst2 only
//!     where allowed), within bounds; combining sources only of one index,
//!     never garbage, never a finished element;
//!   * no deadlock: while some rank has not returned, some actor can move;
//!   * with private_buffers(L) (nodes of L consecutive ranks whose
//!     buffers are private: MPI processes): a unit touches a node peer's
//!     buffers only in its scratch (the window the node shares).
//! The caller then reads the results (at()) and checks them.

#include <chorus/algo/any_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace chorus_sim {

using chorus::any_schedule;
using chorus::operand;
using chorus::step;
using chorus::wait_spec;
using chorus::where;

//! A symbolic element: what it is made of, so that one comparison at the
//! end tells whether every rank's contribution went in exactly once.
struct sym {
    std::uint64_t counts = 0; //!< 7 bits per rank (n <= 9): how many times rank r's input went in
    std::uint64_t index = 0;  //!< 1 + the element's index in the data; 0: garbage (never written)
    int finishes = 0;         //!< epilogues applied
    bool operator==(const sym&) const = default;
};

//! Rank r's contribution mask (one count of its input).
inline std::uint64_t contribution(int r) { return std::uint64_t(1) << (7 * r); }
//! Every one of n ranks' contributions once: what a reduction must hold.
inline std::uint64_t every_contribution(int n) {
    std::uint64_t m = 0;
    for (int r = 0; r < n; ++r) m += contribution(r);
    return m;
}
//! Element `index` of rank r's input, as it starts out.
inline sym input(int r, std::uint64_t index) { return {contribution(r), index + 1, 0}; }

//! How a rank that calls in place shares memory between its buffers (the
//! API's definition differs per collective): element i of buffer `from` is
//! element shift + i of the other one (from == in: `in` lies inside `out`;
//! from == out: `out` lies inside `in`). from == none: not in place.
struct alias {
    where from = where::none;
    std::uint64_t shift = 0;
};

//! One rank's call as the simulator takes it: its schedule, its buffers'
//! first contents (their sizes are the call's), and its aliasing. With
//! alias.from == in the input is copied to where it lives, inside `out`.
//! Scratch is the schedule's scratch_elems(), garbage at first.
struct rank_call {
    any_schedule sch{};
    std::vector<sym> in, out;
    alias in_place{};
};

//! Which executor's channel semantics to run (see the file comment).
enum class channel_order { independent, interleaved };

//! A range of elements of one rank's buffer that a unit reads or writes.
struct footprint {
    int rank = 0;
    where loc = where::none;
    std::uint64_t begin = 0, end = 0;
    //! Same buffer of the same rank, intersecting ranges: a conflict when either is a write.
    bool overlaps(const footprint& o) const {
        return rank == o.rank && loc == o.loc && begin < o.end && o.begin < end;
    }
};

//! The simulator (see the file comment). Build it, run() it once, read
//! the results with at().
class schedule_sim {
public:
    std::string error; //!< why run() failed, with the tail of the interleaving

    //! `pushes`: whether a step may also store to a peer's buffer (dst2),
    //! as ring's last reduce-scatter step does; the exchange schedule never.
    schedule_sim(std::vector<rank_call> calls, channel_order order, bool pushes)
        : n_(int(calls.size())), order_(order), pushes_(pushes), calls_(std::move(calls)) {
        channels_ = calls_.empty() ? 1 : calls_[0].sch.channels();
        returned_.assign(std::size_t(n_), false);
        for (int r = 0; r < n_; ++r) {
            rank_call& k = call(r);
            if (k.sch.channels() != channels_) error = "ranks disagree on the number of channels";
            if (k.sch.rank() != r) error = "rank " + std::to_string(r) + "'s schedule is rank " +
                                           std::to_string(k.sch.rank()) + "'s";
            scratch_.emplace_back(k.sch.scratch_elems());
            if (k.in_place.from == where::in) {
                if (k.in_place.shift + k.in.size() > k.out.size()) error = "in place: in does not fit in out";
                else std::copy(k.in.begin(), k.in.end(), k.out.begin() + std::ptrdiff_t(k.in_place.shift));
            }
            if (k.in_place.from == where::out && k.in_place.shift + k.out.size() > k.in.size())
                error = "in place: out does not fit in in";
            for (int c = 0; c < channels_; ++c) {
                actors_.emplace_back();
                actors_.back().rank = r;
                actors_.back().channel = c;
            }
        }
    }

    //! Ranks of a node (L consecutive) read or write each other's
    //! scratch only (see the file comment); 0: no such rule.
    void private_buffers(int node_size) { private_node_size_ = node_size; }

    //! The call's shape, for the caller's checks and messages.
    int ranks() const { return n_; }
    int channels() const { return channels_; }
    //! Rank r's schedule as given (scratch size and the like).
    const any_schedule& schedule(int r) const { return calls_[std::size_t(r)].sch; }

    //! Element i of rank r's buffer `loc`, through the rank's aliasing.
    const sym& at(int r, where loc, std::uint64_t i) const {
        const operand o = resolve({r, loc, i});
        return vec(o)[o.offset];
    }

    //! The last `last` moves of the run, oldest first ("r.c:reg" registers
    //! rank r's channel c, "r.c:u<p>" runs its unit p, "r.c:fin" passes its
    //! final wait): the interleaving that led to a failure.
    std::string moves(std::size_t last) const {
        std::vector<std::uint64_t> unit(actors_.size(), 0);
        std::string s = "moves: " + std::to_string(trace_.size()) + ", the last:";
        const std::size_t first = trace_.size() > last ? trace_.size() - last : 0;
        for (std::size_t t = 0; t < trace_.size(); ++t) {
            const std::size_t i = std::size_t(trace_[t] / 3);
            const int kind = trace_[t] % 3;
            if (t >= first)
                s += " " + name(actors_[i]) + ":" +
                     (kind == 0 ? "reg" : kind == 2 ? "fin" : "u" + std::to_string(unit[i]));
            if (kind == 1) ++unit[i];
        }
        return s;
    }

    //! Runs to completion, choosing among the actors that can move at
    //! random; false (and `error`) at the first race, bad access, bad
    //! combination or deadlock.
    bool run(std::mt19937& rng) {
        std::vector<std::size_t> enabled;
        while (error.empty()) {
            if (std::all_of(returned_.begin(), returned_.end(), [](bool b) { return b; })) return true;
            enabled.clear();
            for (std::size_t a = 0; a < actors_.size(); ++a)
                if (can_move(actors_[a])) enabled.push_back(a);
            if (!error.empty()) break;
            if (enabled.empty()) {
                error = "deadlock:" + blocked();
                break;
            }
            check_enabled(enabled);
            if (!error.empty()) break;
            advance(enabled[std::uniform_int_distribution<std::size_t>(0, enabled.size() - 1)(rng)]);
        }
        error += "\n  " + moves(64);
        return false;
    }

private:
    //! One (rank, channel): its flag and the unit it would run next.
    struct actor {
        int rank = 0, channel = 0;
        bool registered = false;
        std::uint64_t next = 0; //!< units done (the flag's low half)
        bool finished = false;  //!< past its final wait
        step cur{};             //!< unit `next`, when next < units
        std::vector<operand> srcs, dsts; //!< cur's operands, resolved (none when it moves no data)
        std::vector<footprint> reads, writes;
    };

    int n_ = 0, channels_ = 1;
    channel_order order_;
    bool pushes_;
    std::vector<rank_call> calls_;
    std::vector<std::vector<sym>> scratch_;
    int private_node_size_ = 0;
    std::vector<actor> actors_;
    std::vector<bool> returned_;
    std::vector<int> trace_; //!< moves so far: 3 * actor + (0 register, 1 unit, 2 final)
    std::vector<sym> tmp_;

    //! Rank r's call; the actor of (rank r, channel c); r's units per channel.
    rank_call& call(int r) { return calls_[std::size_t(r)]; }
    const rank_call& call(int r) const { return calls_[std::size_t(r)]; }
    actor& at_actor(int r, int c) { return actors_[std::size_t(r * channels_ + c)]; }
    const actor& at_actor(int r, int c) const { return actors_[std::size_t(r * channels_ + c)]; }
    std::uint64_t units(int r) const { return call(r).sch.units(); }

    //! Where `o` really lives, given its rank's in-place aliasing.
    operand resolve(operand o) const {
        const alias& al = call(o.rank).in_place;
        if (al.from == where::none || o.loc != al.from) return o;
        o.loc = al.from == where::in ? where::out : where::in;
        o.offset += al.shift;
        return o;
    }
    //! The buffer an (already resolved) operand lies in.
    const std::vector<sym>& vec(const operand& o) const {
        const rank_call& k = call(o.rank);
        return o.loc == where::in ? k.in : o.loc == where::out ? k.out : scratch_[std::size_t(o.rank)];
    }
    //! The same, to write (execute()).
    std::vector<sym>& vec(const operand& o) {
        return const_cast<std::vector<sym>&>(static_cast<const schedule_sim*>(this)->vec(o));
    }
    //! Elements of o's buffer (none: 0), for the bounds checks.
    std::uint64_t size_of(const operand& o) const {
        return o.loc == where::none ? 0 : std::uint64_t(vec(o).size());
    }

    //! "r.c": an actor in the list of moves.
    //! "r.c": an actor in the list of moves.
    static std::string name(const actor& a) { return std::to_string(a.rank) + "." + std::to_string(a.channel); }
    //! "rank r channel c unit p": the unit an actor would run next.
    static std::string who(const actor& a) {
        return "rank " + std::to_string(a.rank) + " channel " + std::to_string(a.channel) + " unit " +
               std::to_string(a.next);
    }
    //! What the messages say about a range and a wait.
    static std::string text(const footprint& f) {
        const char* loc = f.loc == where::in ? "in" : f.loc == where::out ? "out" : "scratch";
        return "rank " + std::to_string(f.rank) + " " + loc + "[" + std::to_string(f.begin) + ", " +
               std::to_string(f.end) + ")";
    }
    static std::string text(const wait_spec& w) {
        return "{peer " + std::to_string(w.peer) + ", units " + std::to_string(w.units) + ", span " +
               std::to_string(w.span) + ", stride " + std::to_string(w.stride) +
               (w.every_channel ? ", every channel}" : "}");
    }

    //! Rank q's flag on channel c shows at least `units` units (and so, its
    //! registration): the condition of Env::wait(q, c, units).
    bool flag_ok(int q, int c, std::uint64_t need) {
        if (q < 0 || q >= n_) {
            error = "a wait names rank " + std::to_string(q);
            return false;
        }
        const actor& a = at_actor(q, c);
        return a.registered && a.next >= need;
    }
    //! exec/rank_program.hpp's wait_on_channel.
    bool channel_ok(const wait_spec& w, int self, int c) {
        if (w.peer < 0) return true;
        if (w.span <= 1) return w.peer == self || flag_ok(w.peer, c, w.units);
        for (int i = 0; i < int(w.span); ++i) {
            const int q = w.peer + i * int(w.stride);
            if (q != self && !flag_ok(q, c, w.units)) return false;
        }
        return true;
    }
    //! exec/rank_program.hpp's wait_for, for this executor: every_channel
    //! is honoured only where channels run independently.
    bool wait_ok(const wait_spec& w, int self, int c) {
        if (order_ == channel_order::independent && w.every_channel && w.peer >= 0) {
            for (int ch = 0; ch < channels_; ++ch) {
                if (ch != c && !flag_ok(self, ch, w.units)) return false;
                if (!channel_ok(w, self, ch)) return false;
            }
            return true;
        }
        return channel_ok(w, self, c);
    }

    //! The host executors' order: this actor's next move is its rank's next.
    bool its_turn(const actor& a) const {
        if (order_ == channel_order::independent) return true;
        std::uint64_t position = 0;
        for (int c = 0; c < channels_; ++c) position += at_actor(a.rank, c).next;
        const std::uint64_t u = units(a.rank), c = std::uint64_t(a.channel);
        if (a.next < u) return position == a.next * std::uint64_t(channels_) + c;
        // Every unit done, then the final waits, channel by channel.
        return position == u * std::uint64_t(channels_) && (c == 0 || at_actor(a.rank, a.channel - 1).finished);
    }

    //! Whether a's next move (register, its next unit, its final wait) may
    //! happen now: its turn, and its waits satisfied.
    bool can_move(actor& a) {
        if (!a.registered) return order_ == channel_order::independent || a.channel == 0;
        if (a.finished || !its_turn(a)) return false;
        if (a.next == units(a.rank)) return wait_ok(call(a.rank).sch.final_wait(), a.rank, a.channel);
        for (const wait_spec& w : a.cur.waits)
            if (!wait_ok(w, a.rank, a.channel)) return false;
        return true;
    }

    //! Looks up unit `next` of `a` and what it touches; refuses what no
    //! executor could run (bad ranks, writes to a peer, out of bounds).
    void load(actor& a) {
        a.srcs.clear();
        a.dsts.clear();
        a.reads.clear();
        a.writes.clear();
        if (a.next >= units(a.rank)) return;
        const step& s = a.cur = call(a.rank).sch.unit(a.channel, a.next);
        if (s.count == 0) return;
        const auto fail = [&](const std::string& why) { error = who(a) + ": " + why; };
        if (s.dst.loc == where::none || s.src0.loc == where::none) return fail("moves data without dst or src0");
        if (s.dst.rank != a.rank) return fail("its dst is another rank's buffer");
        if (s.dst2.loc != where::none && !pushes_) return fail("writes a second destination (a push)");
        const auto add = [&](const operand& o, bool dst) {
            if (o.rank < 0 || o.rank >= n_) return fail("an operand names rank " + std::to_string(o.rank));
            if (private_node_size_ > 0 && o.rank != a.rank && o.rank / private_node_size_ == a.rank / private_node_size_ &&
                o.loc != where::scratch)
                return fail("touches node peer " + std::to_string(o.rank) + "'s private buffer");
            const operand r = resolve(o);
            if (o.offset + s.count > size_of(o) || r.offset + s.count > size_of(r))
                return fail("operand out of bounds: " + text({o.rank, o.loc, o.offset, o.offset + s.count}));
            (dst ? a.dsts : a.srcs).push_back(r);
            (dst ? a.writes : a.reads).push_back({r.rank, r.loc, r.offset, r.offset + s.count});
        };
        add(s.dst, true);
        if (s.dst2.loc != where::none) add(s.dst2, true);
        chorus::for_each_source(s, [&](const operand& o) { add(o, false); });
    }

    //! The checks on the units that could run now: the buffers they touch
    //! are registered and not returned, and no two of them conflict.
    void check_enabled(const std::vector<std::size_t>& enabled) {
        for (std::size_t i = 0; i < enabled.size() && error.empty(); ++i) {
            const actor& a = actors_[enabled[i]];
            if (!a.registered || a.next == units(a.rank)) continue;
            for (const auto* fps : {&a.reads, &a.writes})
                for (const footprint& f : *fps) {
                    if (!at_actor(f.rank, a.channel).registered)
                        error = who(a) + " may touch " + text(f) + " before rank " + std::to_string(f.rank) +
                                " registered it on channel " + std::to_string(a.channel);
                    else if (returned_[std::size_t(f.rank)])
                        error = who(a) + " may touch " + text(f) + " after rank " + std::to_string(f.rank) +
                                " returned";
                }
            for (std::size_t j = i + 1; j < enabled.size() && error.empty(); ++j)
                conflict(a, actors_[enabled[j]]);
        }
    }
    //! A write of one of a, b overlapping what the other touches.
    void conflict(const actor& a, const actor& b) {
        for (const actor* x : {&a, &b}) {
            const actor* y = x == &a ? &b : &a;
            for (const footprint& w : x->writes)
                for (const auto* fps : {&y->reads, &y->writes})
                    for (const footprint& f : *fps)
                        if (w.overlaps(f)) {
                            error = "race: " + who(*x) + " may write " + text(w) + " while " + who(*y) +
                                    (fps == &y->reads ? " reads " : " writes ") + text(f);
                            return;
                        }
        }
    }

    //! Makes actor `i`'s next move: register, run a unit, or pass its final wait.
    void advance(std::size_t i) {
        actor& a = actors_[i];
        if (!a.registered) {
            trace_.push_back(int(3 * i));
            for (int c = 0; c < channels_; ++c) {
                actor& b = at_actor(a.rank, c);
                if (&b != &a && order_ == channel_order::independent) continue;
                b.registered = true;
                load(b);
            }
            return;
        }
        if (a.next == units(a.rank)) {
            trace_.push_back(int(3 * i + 2));
            a.finished = true;
            bool all = true;
            for (int c = 0; c < channels_; ++c) all = all && at_actor(a.rank, c).finished;
            returned_[std::size_t(a.rank)] = all;
            return;
        }
        trace_.push_back(int(3 * i + 1));
        if (!a.dsts.empty()) execute(a);
        ++a.next;
        load(a);
    }

    //! The data movement of a's unit: combine the sources element by
    //! element (all read before the element is written), epilogue, store.
    void execute(const actor& a) {
        const step& s = a.cur;
        tmp_.resize(s.count);
        for (std::uint64_t e = 0; e < s.count; ++e) {
            sym v = vec(a.srcs[0])[a.srcs[0].offset + e];
            for (std::size_t q = 1; q < a.srcs.size(); ++q) {
                const sym& b = vec(a.srcs[q])[a.srcs[q].offset + e];
                const operand& o = a.srcs[q];
                if (b.index != v.index || v.index == 0)
                    error = who(a) + " combines elements of different indices or garbage: " +
                            std::to_string(v.index) + " and " + std::to_string(b.index) + " of " +
                            text({o.rank, o.loc, o.offset + e, o.offset + e + 1});
                if (b.finishes != 0 || v.finishes != 0) error = who(a) + " combines a finished element";
                v.counts += b.counts;
            }
            if (s.finish) ++v.finishes;
            tmp_[e] = v;
        }
        for (const operand& d : a.dsts) std::copy(tmp_.begin(), tmp_.end(), vec(d).begin() + std::ptrdiff_t(d.offset));
    }

    //! Every actor that has not finished, and what it is waiting for.
    std::string blocked() {
        std::string s;
        for (const actor& a : actors_) {
            if (a.finished) continue;
            s += "\n  rank " + std::to_string(a.rank) + " channel " + std::to_string(a.channel);
            if (!a.registered) {
                s += " not registered";
                continue;
            }
            const bool last = a.next == units(a.rank);
            s += last ? " at its final wait " + text(call(a.rank).sch.final_wait())
                      : " at unit " + std::to_string(a.next) + " of " + std::to_string(units(a.rank)) +
                            " waiting for " + text(a.cur.waits[0]) + " and " + text(a.cur.waits[1]);
            s += "; done:";
            for (int q = 0; q < n_; ++q) {
                const actor& b = at_actor(q, a.channel);
                s += " " + std::to_string(q) + "=" + (b.registered ? std::to_string(b.next) : "-");
            }
        }
        return s;
    }
};

} // namespace chorus_sim
