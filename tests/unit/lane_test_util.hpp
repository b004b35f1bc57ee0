#pragma once
//! The lane executor on CPU threads, as the lane tests drive it: the lanes
//! of one lane group (a GPU thread block) are CPU threads with a barrier,
//! and every channel of a rank is its own group (its own block). Shared by
//! test_lanes.cpp (every rank a group of threads of one process) and
//! test_lanes_process.cpp (one rank per process).

#include <chorus/backend/transport.hpp>
#include <chorus/exec/lane_channel.hpp>
#include <chorus/exec/host_kernel.hpp>
#include <chorus/exec/lane_p2p.hpp>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace chorus_test {

//! The lanes interface of exec/lane_env.hpp over CPU threads.
struct host_lanes {
    int lane = 0;
    int nlanes = 1;
    std::barrier<>* bar = nullptr;
    unsigned char* box = nullptr; // 16 bytes shared by the group

    int id() const { return lane; }
    int count() const { return nlanes; }
    void sync() const { bar->arrive_and_wait(); }
    template <class V>
    V share(V v) const {
        static_assert(sizeof(V) <= 16);
        bar->arrive_and_wait();
        if (lane == 0) std::memcpy(box, &v, sizeof(V));
        bar->arrive_and_wait();
        V r;
        std::memcpy(&r, box, sizeof(V));
        return r;
    }
    std::uint64_t now_ns() const {
        return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
    }
    void relax() const { std::this_thread::yield(); }
};

//! One lane group: the barrier and shared memory of a thread block, and
//! what its lane 0 returned.
template <class T>
struct lane_group {
    int rank = 0;
    int channel = 0;
    std::unique_ptr<std::barrier<>> bar;
    alignas(16) unsigned char box[16];
    chorus::detail::lane_shared<T> sh;
    chorus::detail::status st = chorus::detail::status::ok;
};

//! Starts one group of `lanes` threads per channel of launch `L` (which
//! must outlive the threads), appended to `groups` and `threads`.
template <class T, class Op, class Schedule>
void start_lane_groups(const chorus::detail::lane_launch<T, Op, Schedule>& L, int lanes,
                       std::vector<std::unique_ptr<lane_group<T>>>& groups, std::vector<std::thread>& threads) {
    const int channels = L.sch.channels();
    for (int c = 0; c < channels; ++c) {
        groups.push_back(std::make_unique<lane_group<T>>());
        lane_group<T>* g = groups.back().get();
        g->rank = L.rank;
        g->channel = c;
        g->bar = std::make_unique<std::barrier<>>(lanes);
        for (int l = 0; l < lanes; ++l)
            threads.emplace_back([&L, lanes, l, c, g] {
                host_lanes hl{l, lanes, g->bar.get(), g->box};
                const chorus::detail::status st = chorus::detail::run_lane_channel(hl, L, c, g->sh);
                if (l == 0) g->st = st;
            });
    }
}

//! The signature of one rank's call of (T, Op) by the policy with id
//! `algo_id` on `channels` channels, as the GPU backend fills
//! lane_launch::sig (detail::signature_of; `count`: the "v" collectives'
//! sum of counts, whose fingerprint is `counts_id`).
template <class T, class Op>
chorus::detail::call_signature lane_signature_of(chorus::collective coll, int channels, int root,
                                                 std::uint64_t count, std::uint64_t algo_id,
                                                 std::uint64_t counts_id = 0) {
    chorus::detail::call c;
    c.coll = coll;
    c.root = root;
    c.signature_count = count;
    c.counts_id = counts_id;
    c.types = chorus::detail::call_types_of<T, Op>();
    return chorus::detail::signature_of(c, channels, algo_id);
}

//! Runs every channel of one rank's launch, each a group of `lanes`
//! threads, to the end; the first channel's failure, else ok.
template <class T, class Op, class Schedule>
chorus::detail::status run_rank_lanes(const chorus::detail::lane_launch<T, Op, Schedule>& L, int lanes) {
    std::vector<std::unique_ptr<lane_group<T>>> groups;
    std::vector<std::thread> threads;
    start_lane_groups(L, lanes, groups, threads);
    for (auto& t : threads) t.join();
    for (const auto& g : groups)
        if (g->st != chorus::detail::status::ok) return g->st;
    return chorus::detail::status::ok;
}

//! What one process's ranks share, kept across calls (the counters in the
//! areas continue, as on a device): every rank's lane_rank_area, the abort
//! word and the failure records. `maps`, when filled (one per rank), is
//! handed to the executor as lane_world::maps.
struct lane_world_host {
    std::vector<std::unique_ptr<chorus::detail::lane_rank_area>> areas;
    std::vector<chorus::detail::lane_rank_area*> table;
    std::uint32_t abort = 0;
    std::vector<chorus::detail::lane_fault> faults;
    std::vector<chorus::detail::lane_peer_map> maps;
    //! The LL receive regions (exec/lane_ll.hpp), when enable_ll was called.
    std::vector<std::unique_ptr<std::uint64_t[]>> ll;
    std::vector<std::uint64_t*> ll_table;
    std::uint64_t ll_slot_words = 0;
    std::uint64_t ll_limit = 0; //!< payload bytes per source the regions hold
    explicit lane_world_host(int n) : faults(static_cast<std::size_t>(n)) {
        for (int r = 0; r < n; ++r) {
            areas.push_back(std::make_unique<chorus::detail::lane_rank_area>());
            table.push_back(areas.back().get());
        }
    }
    //! Gives every rank a zeroed LL region with room for `payload_bytes` per source.
    void enable_ll(std::uint64_t payload_bytes) {
        const int n = int(table.size());
        ll_limit = payload_bytes;
        ll_slot_words = chorus::ll_slot_words(payload_bytes);
        ll.clear();
        ll_table.clear();
        for (int r = 0; r < n; ++r) {
            const std::size_t words = std::size_t(2 * std::uint64_t(n) * ll_slot_words);
            ll.push_back(std::make_unique<std::uint64_t[]>(words)); // value-initialised: zero
            ll_table.push_back(ll.back().get());
        }
    }
    chorus::detail::lane_world view() {
        chorus::detail::lane_world v{table.data(), &abort, faults.data(), int(table.size()),
                                     maps.empty() ? nullptr : maps.data()};
        if (!ll_table.empty()) {
            v.ll = ll_table.data();
            v.ll_slot_words = ll_slot_words;
        }
        return v;
    }
    void set_abort() { std::atomic_ref<std::uint32_t>(abort).store(1, std::memory_order_release); }
};

//! One call a lane stream runs: every lane of the group calls it.
using lane_call = std::function<chorus::detail::status(const host_lanes&)>;

//! A send (is_send) or receive of `count` elements of T at `buf`, to or
//! from `peer`, on rank `rank` of `w`, as the GPU backend launches it
//! (element size and type_hash of T).
template <class T>
chorus::detail::lane_p2p_launch p2p_launch(lane_world_host& w, int rank, bool is_send, int peer, T* buf,
                                           std::uint64_t count, std::uint64_t timeout_ms = 20000) {
    chorus::detail::lane_p2p_launch L{};
    L.world = w.view();
    L.rank = rank;
    L.peer = peer;
    L.is_send = is_send;
    L.buf = static_cast<void*>(buf);
    L.count = count;
    L.elem_bytes = sizeof(T);
    L.type_id = chorus::detail::type_hash<T>();
    L.timeout_ns = timeout_ms * 1000000ull;
    return L;
}

//! The call that runs one send or receive (a kernel of exec/lane_p2p.hpp).
inline lane_call p2p_call(const chorus::detail::lane_p2p_launch& L) {
    return [L](const host_lanes& hl) { return chorus::detail::run_lane_p2p(hl, L); };
}

//! A lane stream: calls of one rank run in order by one group of lanes
//! (a CUDA stream whose kernels are one block each). A failed call does
//! not stop the stream (as on a GPU: later kernels still run, and fail
//! at once on the abort word); `result` holds every call's status.
struct lane_stream {
    int rank = 0;
    std::vector<lane_call> calls;
    std::vector<chorus::detail::status> result;
};

//! Runs every stream, each on its own group of `lanes` threads, to the end.
inline void run_lane_streams(std::vector<lane_stream>& streams, int lanes) {
    std::vector<std::unique_ptr<std::barrier<>>> bars;
    std::vector<std::unique_ptr<unsigned char[]>> boxes;
    std::vector<std::thread> threads;
    for (auto& s : streams) {
        s.result.assign(s.calls.size(), chorus::detail::status::ok);
        bars.push_back(std::make_unique<std::barrier<>>(lanes));
        boxes.push_back(std::make_unique<unsigned char[]>(16));
        std::barrier<>* bar = bars.back().get();
        unsigned char* box = boxes.back().get();
        for (int l = 0; l < lanes; ++l)
            threads.emplace_back([&s, bar, box, l, lanes] {
                const host_lanes hl{l, lanes, bar, box};
                for (std::size_t i = 0; i < s.calls.size(); ++i) {
                    const chorus::detail::status st = s.calls[i](hl);
                    if (l == 0) s.result[i] = st;
                }
            });
    }
    for (auto& t : threads) t.join();
}

} // namespace chorus_test
