#pragma once
//! The lane executor on CPU threads, as the lane tests drive it: the lanes
//! of one lane group (a GPU thread block) are CPU threads with a barrier,
//! and every channel of a rank is its own group (its own block). Shared by
//! test_lanes.cpp (every rank a group of threads of one process) and
//! test_lanes_process.cpp (one rank per process).

#include <chorus/exec/lane_env.hpp>

#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
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

} // namespace chorus_test
