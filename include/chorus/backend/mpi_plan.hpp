#pragma once
//! \file backend/mpi_plan.hpp
//! The MPI schedule executor's plan: which of a rank's reads and pushes
//! travel as messages (with their triggers and tags) and which meet node
//! peers in shared memory. The protocol is described in
//! backend/mpi_schedule.hpp, which includes this file.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "../algo/schedule.hpp"
#include "../core/error.hpp"

namespace chorus::detail {

//! One transfer: a contiguous slice of the sender's buffer `loc`.
struct sched_xfer {
    int peer = -1;             //!< the receiver (send list) or the sender (receive list)
    int channel = 0;           //!< trigger: sent right after the sender posts
    std::uint64_t unit = 0;    //!<   `unit` units done on `channel`
    where loc = where::none;
    std::uint64_t offset = 0;  //!< elements
    std::uint64_t count = 0;   //!< elements
    std::uint64_t staging = 0; //!< receive list: byte offset of its staging
    int tag = 0;               //!< tag of its first message
    int frags = 0;             //!< messages (each at most sched_plan::max_message_bytes)
    std::size_t req = 0;       //!< receive list: index of its first request
    //! A push: sent from the sender's own dst, received into the
    //! receiver's own slice (loc, offset): in a send the source, in a
    //! receive the destination; no staging.
    bool push = false;
};

//! One of this rank's pushes, as planned: the step writes its own `dst`
//! and the same values to `target` (a peer's slice).
struct sched_push {
    operand dst{};
    operand target{};
    std::uint64_t count = 0;
};

//! One of this rank's peer reads, as planned: the slice, and where its
//! data arrives (`skip` elements into receive transfer `xfer`).
struct sched_read {
    operand src{};
    std::uint64_t count = 0;
    std::size_t xfer = 0;
    std::uint64_t skip = 0;
};

//! The messages of one rank in one collective (see the file comment).
class sched_plan {
public:
    static constexpr std::uint64_t max_message_bytes = std::uint64_t(1) << 30;

    std::vector<sched_xfer> sends; //!< sorted by trigger (unit, channel): the order they go out
    std::vector<sched_xfer> recvs; //!< in pair order
    std::vector<sched_read> reads; //!< this rank's peer reads, in execution order
    std::vector<sched_push> pushes; //!< this rank's pushes, in execution order
    //! Receives of pushes, per (sender, channel) in unit order: indices
    //! into recvs; [peer * push_channels + channel]; empty when none.
    std::vector<std::vector<std::size_t>> push_recvs;
    int push_channels = 0;
    std::uint64_t staging_bytes = 0;
    std::size_t recv_messages = 0;
    std::uint64_t tags = 0;        //!< tags used by the busiest pair (tags 0 .. tags-1)
    //! Per rank: its scratch as planned (out of place) fits its window.
    std::vector<char> in_window;
    //! Per rank: a node peer reads or pushes to its window.
    std::vector<char> reached;
    //! Per rank: some rank waits for it to have entered the call (a wait
    //! for 0 units); only then does it post that to its node flags.
    std::vector<char> entry_waited;
    //! Some rank reads or pushes to a node peer's window: every rank then
    //! posts its progress to the node's flags, and waits on a node peer
    //! are waits on those flags (the same answer on every rank: each walks
    //! every rank's schedule).
    bool shared = false;
    //! The first step seen that writes only a peer's buffer (rank < 0:
    //! none): `rank`'s unit `unit` of channel `channel` writes rank
    //! `target`'s buffer and not its own.
    struct push_info {
        int rank = -1, target = -1, channel = 0;
        std::uint64_t unit = 0;
    } push{};

    //! Plans rank `me`'s messages. `schedule_of(q)` returns rank q's
    //! schedule with in_place = false, for every rank q, this one too:
    //! both sides of every message plan it from the same schedule, so they
    //! agree whatever their in_place (the executor checks that this rank's
    //! own schedule reads and pushes the same slices). Returns false when
    //! some step writes only a peer's buffer (see `push`); nothing is
    //! planned then.
    //! `node_of[q]` is rank q's node and `window_elems` the elements of
    //! the window each rank's node peers can read (0: none): a rank whose
    //! scratch fits its window keeps it there, and the reads and pushes of
    //! a node peer's scratch are then done in shared memory, not planned
    //! as messages (see `in_window` and `shared`).
    template <class ScheduleOf>
    bool build(ScheduleOf&& schedule_of, int me, int n, std::uint64_t elem_bytes, const std::vector<int>& node_of,
               std::uint64_t window_elems) {
        in_window.assign(static_cast<std::size_t>(n), 0);
        reached.assign(static_cast<std::size_t>(n), 0);
        entry_waited.assign(static_cast<std::size_t>(n), 0);
        shared = false;
        if (window_elems != 0)
            for (int q = 0; q < n; ++q)
                in_window[std::size_t(q)] = schedule_of(q).scratch_elems() <= window_elems ? 1 : 0;
        // Whether `reader` reaches `o` in shared memory.
        auto direct = [&](int reader, const operand& o) {
            const bool d = o.loc == where::scratch && in_window[std::size_t(o.rank)] &&
                           node_of[std::size_t(o.rank)] == node_of[std::size_t(reader)];
            shared = shared || d;
            if (d) reached[std::size_t(o.rank)] = 1;
            return d;
        };
        sends.clear();
        recvs.clear();
        reads.clear();
        pushes.clear();
        push_recvs.clear();
        push_channels = 0;
        staging_bytes = 0;
        recv_messages = 0;
        tags = 0;
        push = {};
        for (int q = 0; q < n; ++q) {
            open_.clear();
            const auto s = schedule_of(q);
            push_channels = std::max(push_channels, s.channels());
            auto read = [&](int c, std::uint64_t u, const operand& o, std::uint64_t cnt) {
                if (direct(q, o)) return;
                if (q == me) add(recvs, o.rank, c, u, o, cnt, true);
                else if (o.rank == me) add(sends, q, c, u, o, cnt, false);
            };
            auto pushed = [&](int c, std::uint64_t u, const operand& dst, const operand& target, std::uint64_t cnt) {
                if (direct(q, target)) return;
                if (q == me) {
                    pushes.push_back({dst, target, cnt});
                    add_push(sends, target.rank, c, u + 1, dst, cnt);
                } else if (target.rank == me) {
                    add_push(recvs, q, c, u + 1, target, cnt);
                }
            };
            if (!walk(s, q, n, read, pushed)) return false;
        }
        // Tags in pair order, before the sends are sorted by trigger.
        const std::uint64_t per = std::max<std::uint64_t>(1, max_message_bytes / elem_bytes);
        std::vector<std::uint64_t> next(static_cast<std::size_t>(n), 0);
        auto number = [&](sched_xfer& x) {
            x.frags = static_cast<int>((x.count + per - 1) / per);
            std::uint64_t& t = next[static_cast<std::size_t>(x.peer)];
            x.tag = static_cast<int>(std::min<std::uint64_t>(t, 0x7fffffff));
            t += std::uint64_t(x.frags);
            tags = std::max(tags, t);
        };
        for (std::size_t i = 0; i < recvs.size(); ++i) {
            sched_xfer& x = recvs[i];
            number(x);
            x.req = recv_messages;
            recv_messages += std::size_t(x.frags);
            if (x.push) { // empty unless this rank receives pushes
                if (push_recvs.empty()) push_recvs.resize(std::size_t(n) * std::size_t(push_channels));
                push_recvs[std::size_t(x.peer) * std::size_t(push_channels) + std::size_t(x.channel)].push_back(i);
                continue;
            }
            x.staging = staging_bytes;
            staging_bytes += (x.count * elem_bytes + 63) / 64 * 64;
        }
        std::fill(next.begin(), next.end(), 0);
        for (sched_xfer& x : sends) number(x);
        std::stable_sort(sends.begin(), sends.end(), [](const sched_xfer& a, const sched_xfer& b) {
            return a.unit != b.unit ? a.unit < b.unit : a.channel < b.channel;
        });
        return true;
    }

private:
    struct key {
        int peer, channel;
        std::uint64_t unit;
        where loc;
        bool recv;
        bool operator==(const key&) const = default;
    };
    struct key_hash {
        std::size_t operator()(const key& k) const noexcept {
            std::uint64_t h = 1469598103934665603ull;
            auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
            mix(std::uint64_t(std::uint32_t(k.peer)));
            mix(std::uint64_t(std::uint32_t(k.channel)));
            mix(k.unit);
            mix(std::uint64_t(k.loc) | (k.recv ? 256u : 0u));
            return static_cast<std::size_t>(h);
        }
    };
    //! The last transfer of each (pair, trigger, buffer): where a read whose
    //! slice continues it is merged.
    std::unordered_map<key, std::size_t, key_hash> open_;
    std::vector<std::uint64_t> seen_;

    //! Adds a read of `src` (`cnt` elements) to the transfers of the pair
    //! with `peer`, merged into the last one with the same trigger and
    //! buffer when it continues that one's slice.
    void add(std::vector<sched_xfer>& list, int peer, int c, std::uint64_t u, const operand& src, std::uint64_t cnt,
             bool recv) {
        const key k{peer, c, u, src.loc, recv};
        const auto it = open_.find(k);
        if (it != open_.end()) {
            sched_xfer& x = list[it->second];
            if (x.offset + x.count == src.offset) {
                if (recv) reads.push_back({src, cnt, it->second, x.count});
                x.count += cnt;
                return;
            }
        }
        if (recv) reads.push_back({src, cnt, list.size(), 0});
        open_[k] = list.size();
        list.push_back(transfer(peer, c, u, src, cnt, false));
    }

    //! A push transfer (never merged).
    void add_push(std::vector<sched_xfer>& list, int peer, int c, std::uint64_t trigger, const operand& slice,
                  std::uint64_t cnt) {
        list.push_back(transfer(peer, c, trigger, slice, cnt, true));
    }

    static sched_xfer transfer(int peer, int c, std::uint64_t trigger, const operand& slice, std::uint64_t cnt,
                               bool push) {
        sched_xfer x{};
        x.peer = peer;
        x.channel = c;
        x.unit = trigger;
        x.loc = slice.loc;
        x.offset = slice.offset;
        x.count = cnt;
        x.push = push;
        return x;
    }

    //! Walks schedule `s` of rank `owner` in execution order and calls
    //! f(channel, trigger, source, count) for every source that is another
    //! rank's buffer, and g(channel, unit, dst, target, count) for every
    //! push. False (and `push` set) at the first step whose dst is a
    //! peer's buffer.
    template <class Sched, class F, class G>
    bool walk(const Sched& s, int owner, int n, F&& f, G&& g) {
        const int C = s.channels();
        const std::uint64_t U = s.units();
        seen_.assign(static_cast<std::size_t>(C) * static_cast<std::size_t>(n), 0);
        auto bad_rank = [&](int r) {
            if (r >= 0 && r < n) return;
            throw error(errc::internal, "chorus: rank " + std::to_string(owner) + "'s schedule names rank " +
                                            std::to_string(r) + " of a communicator of " + std::to_string(n));
        };
        for (std::uint64_t p = 0; p < U; ++p) {
            for (int c = 0; c < C; ++c) {
                const step st = s.unit(c, p);
                std::uint64_t* seen = seen_.data() + static_cast<std::size_t>(c) * static_cast<std::size_t>(n);
                for (const wait_spec& w : st.waits) {
                    if (w.peer < 0) continue;
                    const int span = w.span > 1 ? int(w.span) : 1;
                    for (int i = 0; i < span; ++i) {
                        const int q = w.peer + i * int(w.stride);
                        if (q == owner || q < 0 || q >= n) continue;
                        seen[q] = std::max(seen[q], w.units);
                    }
                }
                mark_entry_waits(st.waits[0], owner, n);
                mark_entry_waits(st.waits[1], owner, n);
                if (st.count == 0) continue;
                if (st.dst.rank != owner) {
                    push = {owner, st.dst.rank, c, p};
                    return false;
                }
                for_each_source(st, [&](const operand& o) {
                    if (o.rank == owner) return;
                    bad_rank(o.rank);
                    f(c, seen[o.rank], o, st.count);
                });
                if (st.dst2.loc != where::none && st.dst2.rank != owner) {
                    bad_rank(st.dst2.rank);
                    g(c, p, st.dst, st.dst2, st.count);
                }
            }
        }
        mark_entry_waits(s.final_wait(), owner, n);
        return true;
    }
    //! Marks the ranks `w` waits on for 0 units (entry_waited).
    void mark_entry_waits(const wait_spec& w, int owner, int n) {
        if (w.peer < 0 || w.units != 0) return;
        const int span = w.span > 1 ? int(w.span) : 1;
        for (int i = 0; i < span; ++i) {
            const int q = w.peer + i * int(w.stride);
            if (q != owner && q >= 0 && q < n) entry_waited[std::size_t(q)] = 1;
        }
    }
};

} // namespace chorus::detail
