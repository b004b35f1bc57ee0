#pragma once
//! \file model/fit.hpp
//! Corrections from measurements: what the calibration tools
//! (tools/chorus_calibrate.cpp on the host backends, tools/
//! chorus_calibrate_gpu.cu on CUDA devices) do with the times they measure.
//! A correction of (collective, algorithm, rank count) is measured /
//! first-order prediction at the sizes of the correction grid (8 B * 4^i,
//! model/cost.hpp); the model multiplies its prediction by it, so the
//! calibrated model reproduces the measured times at the grid sizes, and
//! `automatic`'s crossovers (where one candidate's predicted time drops
//! below another's) come from the measurements, not from the first-order
//! constants. Host-only; no device code.

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "../core/error.hpp"
#include "cost.hpp"

namespace chorus::model {

//! One measured call: its nccl-tests size in bytes and its time in seconds.
struct measurement {
    double bytes = 0;
    double seconds = 0;
};

//! The correction grid point `bytes` lies nearest to in log scale (8 B * 4^i),
//! or -1 when it is more than half a grid step (a factor 2) from every point.
inline int correction_index(double bytes) {
    if (!(bytes > 0)) return -1;
    const double x = std::log2(bytes / 8.0) / 2.0;
    const long i = std::lround(x);
    if (i < 0 || i >= correction_points || std::fabs(x - double(i)) > 0.5) return -1;
    return int(i);
}

//! Fits the correction of (c, a, nranks) to measurements `m` against the
//! first-order figures of `base` (with `ranks_per_node` as predict() takes
//! it): at each grid point the measured / predicted ratio of the
//! measurement nearest to it (sizes more than a factor 2 from every grid
//! point, times that are not positive and finite, and sizes the model
//! predicts no time for are left out); grid points without one repeat the
//! nearest grid point that has one. False, and `out` untouched, when no
//! measurement is usable.
inline bool fit_correction(const topology& base, collective c, algorithm a, int nranks, int ranks_per_node,
                           std::span<const measurement> m, correction& out) {
    if (nranks < 2) throw error(errc::invalid_argument, "chorus::model::fit_correction: `nranks` must be >= 2");
    double ratio[correction_points] = {};
    double dist[correction_points] = {};
    bool have[correction_points] = {};
    for (const measurement& x : m) {
        const int g = correction_index(x.bytes);
        if (g < 0 || !(x.seconds > 0) || !std::isfinite(x.seconds)) continue;
        const double pred = predict_uncorrected(c, a, nranks, x.bytes, base, ranks_per_node);
        if (!(pred > 0) || !std::isfinite(pred)) continue;
        const double d = std::fabs(std::log2(x.bytes / correction::grid_bytes(g)));
        if (have[g] && d >= dist[g]) continue;
        ratio[g] = x.seconds / pred;
        dist[g] = d;
        have[g] = true;
    }
    int first = -1;
    for (int g = 0; g < correction_points && first < 0; ++g)
        if (have[g]) first = g;
    if (first < 0) return false;
    correction k{};
    k.coll = c;
    k.algo = a;
    k.nranks = nranks;
    for (int g = 0; g < correction_points; ++g) {
        int best = first;
        for (int h = 0; h < correction_points; ++h)
            if (have[h] && std::abs(h - g) < std::abs(best - g)) best = h;
        k.ratio[g] = float(ratio[best]);
    }
    out = k;
    return true;
}

//! Puts `k` into `t`, replacing the correction of the same (collective,
//! algorithm, rank count) if there is one; throws when `t` holds
//! max_corrections others already.
inline void set_correction(topology& t, const correction& k) {
    for (int i = 0; i < t.correction_count && i < max_corrections; ++i)
        if (t.corrections[i].coll == k.coll && t.corrections[i].algo == k.algo &&
            t.corrections[i].nranks == k.nranks) {
            t.corrections[i] = k;
            return;
        }
    if (t.correction_count >= max_corrections)
        throw error(errc::invalid_argument, "chorus::model::set_correction: the topology holds " +
                                                std::to_string(max_corrections) + " corrections already");
    t.corrections[t.correction_count++] = k;
}

} // namespace chorus::model
