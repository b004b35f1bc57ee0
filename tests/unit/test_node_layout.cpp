// The node split of GPU ranks across nodes (core/node_layout.hpp):
// exhaustively over every assignment of up to 8 ranks to hosts (every set
// partition) and every ranks_per_node from 0 to n + 1, against the rules
// the GPU backend relies on.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "chorus/core/error.hpp"
#include "chorus/core/node_layout.hpp"

namespace {

using chorus::detail::node_layout;
using chorus::detail::plan_node_layout;

//! Calls f(host_of) for every set partition of n ranks (restricted growth strings).
template <class F>
void each_partition(int n, F&& f) {
    std::vector<int> a(static_cast<std::size_t>(n), 0);
    for (;;) {
        f(a);
        int i = n - 1;
        for (; i > 0; --i) {
            const int mx = *std::max_element(a.begin(), a.begin() + i);
            if (a[static_cast<std::size_t>(i)] <= mx) {
                ++a[static_cast<std::size_t>(i)];
                std::fill(a.begin() + i + 1, a.end(), 0);
                break;
            }
        }
        if (i <= 0) return;
    }
}

//! Whether the split should succeed, from the rules in the header.
bool expect_ok(const std::vector<int>& host_of, int k) {
    std::vector<int> sizes;
    const int hosts = *std::max_element(host_of.begin(), host_of.end()) + 1;
    for (int h = 0; h < hosts; ++h)
        sizes.push_back(static_cast<int>(std::count(host_of.begin(), host_of.end(), h)));
    if (k == 0) return std::all_of(sizes.begin(), sizes.end(), [&](int s) { return s == sizes[0]; });
    return std::all_of(sizes.begin(), sizes.end(), [&](int s) { return s % k == 0; });
}

void check_layout(const std::vector<int>& host_of, int k, const node_layout& p) {
    const int n = static_cast<int>(host_of.size());
    REQUIRE(p.size() == n);
    REQUIRE(p.nodes * p.local_size == n);
    REQUIRE(p.members.size() == host_of.size());
    if (k > 0) CHECK(p.local_size == k);
    std::vector<int> seen(host_of.size(), 0);
    for (int node = 0; node < p.nodes; ++node) {
        for (int l = 0; l < p.local_size; ++l) {
            const int r = p.rank_at(node, l);
            REQUIRE(r >= 0);
            REQUIRE(r < n);
            ++seen[static_cast<std::size_t>(r)];
            CHECK(p.node_of[static_cast<std::size_t>(r)] == node);
            CHECK(p.local_of[static_cast<std::size_t>(r)] == l);
            // One host per node; ranks in communicator order inside it.
            CHECK(host_of[static_cast<std::size_t>(r)] == host_of[static_cast<std::size_t>(p.rank_at(node, 0))]);
            if (l > 0) CHECK(p.rank_at(node, l - 1) < r);
        }
        // Nodes numbered by their smallest rank.
        if (node > 0) CHECK(p.rank_at(node - 1, 0) < p.rank_at(node, 0));
        // An emulated node is a run of consecutive ranks of its host; with
        // k == 0 a node is a whole host.
        const int h = host_of[static_cast<std::size_t>(p.rank_at(node, 0))];
        std::vector<int> host_ranks;
        for (int r = 0; r < n; ++r)
            if (host_of[static_cast<std::size_t>(r)] == h) host_ranks.push_back(r);
        const auto first = std::find(host_ranks.begin(), host_ranks.end(), p.rank_at(node, 0));
        REQUIRE(first != host_ranks.end());
        CHECK((first - host_ranks.begin()) % p.local_size == 0);
        for (int l = 0; l < p.local_size; ++l) CHECK(first[l] == p.rank_at(node, l));
        if (k == 0) CHECK(static_cast<int>(host_ranks.size()) == p.local_size);
    }
    for (int s : seen) CHECK(s == 1);
}

} // namespace

TEST_CASE("node_layout: every host assignment of 1..8 ranks, every ranks_per_node") {
    long cases = 0, ok = 0;
    for (int n = 1; n <= 8; ++n)
        each_partition(n, [&](const std::vector<int>& host_of) {
            for (int k = 0; k <= n + 1; ++k) {
                ++cases;
                const bool want = expect_ok(host_of, k);
                if (want) {
                    ++ok;
                    const node_layout p = plan_node_layout(host_of, k);
                    check_layout(host_of, k, p);
                } else {
                    try {
                        (void)plan_node_layout(host_of, k, "fn");
                        FAIL("plan_node_layout accepted an uneven split");
                    } catch (const chorus::error& e) {
                        CHECK(e.code() == chorus::errc::invalid_argument);
                        CHECK(std::string(e.what()).find("ranks_per_node") != std::string::npos);
                        CHECK(std::string(e.what()).rfind("fn: ", 0) == 0);
                    }
                }
            }
        });
    CHECK(cases > 4000);
    CHECK(ok > 0);
    CHECK(ok < cases);
}

TEST_CASE("node_layout: one host, emulated nodes, and bad arguments") {
    // 8 ranks on one host, CHORUS_RANKS_PER_NODE=4: nodes {0..3}, {4..7}.
    const node_layout p = plan_node_layout(std::vector<int>(8, 7), 4);
    CHECK(p.nodes == 2);
    CHECK(p.local_size == 4);
    CHECK(p.rank_at(1, 2) == 6);
    CHECK(p.node_of[5] == 1);
    CHECK(p.local_of[5] == 1);
    // ranks_per_node 0 or n: one node (make_communicator then behaves as on one node).
    CHECK(plan_node_layout(std::vector<int>(6, 0), 0).nodes == 1);
    CHECK(plan_node_layout(std::vector<int>(6, 0), 6).nodes == 1);
    // Hosts interleaved (mpirun --map-by node): 0,2,4 on one host, 1,3,5 on the other.
    const node_layout q = plan_node_layout({5, 9, 5, 9, 5, 9}, 0);
    CHECK(q.nodes == 2);
    CHECK(q.members == std::vector<int>{0, 2, 4, 1, 3, 5});
    // Emulated nodes inside interleaved hosts: runs of the host's own ranks.
    const node_layout e = plan_node_layout({1, 2, 1, 2, 1, 2, 1, 2}, 2);
    CHECK(e.members == std::vector<int>{0, 2, 1, 3, 4, 6, 5, 7});
    CHECK_THROWS_AS(plan_node_layout({}, 0), chorus::error);
    try {
        (void)plan_node_layout({0, 0}, -1);
        FAIL("a negative ranks_per_node was accepted");
    } catch (const chorus::error& err) {
        CHECK(err.code() == chorus::errc::invalid_argument);
        CHECK(std::string(err.what()).find("`ranks_per_node` is -1") != std::string::npos);
    }
    // 3 ranks on one host, 2 on another: unequal nodes.
    CHECK_THROWS_AS(plan_node_layout({0, 0, 0, 1, 1}, 0), chorus::error);
    CHECK_THROWS_AS(plan_node_layout({0, 0, 0, 0}, 3), chorus::error);
}
