#pragma once
//! \file core/split_plan.hpp
//! Who goes where when a communicator splits (MPI_Comm_split semantics):
//! the ranks that pass the same non-negative `color` form one new
//! communicator, ordered by `key`, ties broken by their old rank; a rank
//! with a negative color joins none. Host code, no CUDA: the GPU backend's
//! split (backend/gpu.hpp) plans with it, and the unit tests check it.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "error.hpp"

namespace chorus::detail {

struct split_plan {
    //! Per old rank: the index of its group in `members`, -1 for none
    //! (negative color), and its rank in that group (-1 for none).
    std::vector<int> group;
    std::vector<int> new_rank;
    //! Per group, in increasing color: its old ranks in new-rank order.
    std::vector<std::vector<int>> members;
    //! Per group: the color.
    std::vector<int> color;
};

//! Plans a split of colors.size() ranks: colors[r] and keys[r] are what
//! old rank r passed. Throws errc::invalid_argument (naming `fn`) when the
//! spans differ in size.
inline split_plan plan_split(std::span<const int> colors, std::span<const int> keys,
                             const std::string& fn = "chorus::split") {
    if (colors.size() != keys.size())
        throw error(errc::invalid_argument, fn + ": " + std::to_string(colors.size()) + " colors but " +
                                                std::to_string(keys.size()) + " keys");
    const int n = static_cast<int>(colors.size());
    split_plan p;
    p.group.assign(colors.size(), -1);
    p.new_rank.assign(colors.size(), -1);
    std::vector<int> order;
    order.reserve(colors.size());
    for (int r = 0; r < n; ++r)
        if (colors[std::size_t(r)] >= 0) order.push_back(r);
    // By color, then key, then old rank: each group is a run of `order`.
    std::sort(order.begin(), order.end(), [&](int a, int b) {
        const int ca = colors[std::size_t(a)], cb = colors[std::size_t(b)];
        if (ca != cb) return ca < cb;
        const int ka = keys[std::size_t(a)], kb = keys[std::size_t(b)];
        if (ka != kb) return ka < kb;
        return a < b;
    });
    for (std::size_t i = 0; i < order.size(); ++i) {
        const int r = order[i];
        const int c = colors[std::size_t(r)];
        if (p.color.empty() || p.color.back() != c) {
            p.color.push_back(c);
            p.members.emplace_back();
        }
        p.group[std::size_t(r)] = static_cast<int>(p.members.size()) - 1;
        p.new_rank[std::size_t(r)] = static_cast<int>(p.members.back().size());
        p.members.back().push_back(r);
    }
    return p;
}

} // namespace chorus::detail
