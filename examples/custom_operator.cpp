// custom_operator: reductions NCCL cannot express, as ordinary C++ functors.
//
// A chorus reduction operator is any trivially copyable functor with
// `T operator()(T, T) const` over a trivially copyable element type T. chorus
// inlines it into the algorithm's reduce loop: no function pointer, no
// registration, no packing into a built-in type. To be used with ring<> (which
// combines operands in a rank order of its choosing) it must declare
// `static constexpr bool commutative = true`; without it, ring<> refuses the
// operator at compile time. Marking operator() CHORUS_HD (__host__ __device__
// under nvcc, nothing otherwise) lets the same operator run in a GPU kernel.
//
// Why NCCL cannot do this: ncclAllReduce takes an ncclRedOp_t from a fixed
// list (sum, prod, max, min, avg, plus ncclRedOpCreatePreMulSum, a scaled sum)
// and an ncclDataType_t from a fixed list of scalars; there is no user-defined
// operator or struct type (NVIDIA/nccl issue #753; complex numbers #539). The
// usual workarounds are an all_gather followed by a local reduction (n times
// the traffic), or, for arg-max only, packing an order-preserving integer
// encoding of the value and a complemented index into one 64-bit word and
// using max. A complex product has no workaround inside one NCCL call.
//
// The program checks its own results and prints "custom_operator: OK".

#include <chorus/chorus.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <exception>
#include <numbers>
#include <span>

namespace {

// --- arg-max: the best value and who holds it --------------------------------

struct scored {
    float value;
    int index; // here: the rank that produced the value
};

//! Larger value wins; equal values go to the lower index, so the result does
//! not depend on the order operands meet: the operator is commutative (and
//! associative), as ring<> requires. (NaN scores are not handled.)
struct arg_max {
    static constexpr bool commutative = true;
    CHORUS_HD constexpr scored operator()(const scored& a, const scored& b) const {
        if (a.value != b.value) return a.value > b.value ? a : b;
        return a.index < b.index ? a : b;
    }
};

// --- complex product ----------------------------------------------------------

struct cplx {
    double re;
    double im;
};

//! (a.re + i a.im)(b.re + i b.im). Commutative; associative up to rounding,
//! like any floating-point reduction.
struct complex_mul {
    static constexpr bool commutative = true;
    CHORUS_HD constexpr cplx operator()(const cplx& a, const cplx& b) const {
        return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    }
};

constexpr int nranks = 5;
constexpr int nitems = 4;

// Scores each rank gives four items. Item 0 ties between ranks 1 and 3 and
// item 1 between ranks 0 and 2: the lower rank must win.
constexpr float scores[nranks][nitems] = {
    {0.50f, 0.90f, 0.10f, 0.70f},
    {0.80f, 0.20f, 0.60f, 0.30f},
    {0.30f, 0.90f, 0.40f, 0.20f},
    {0.80f, 0.10f, 0.60f, 0.35f},
    {0.20f, 0.40f, 0.65f, 0.70f},
};
constexpr scored expected_best[nitems] = {{0.80f, 1}, {0.90f, 0}, {0.65f, 4}, {0.70f, 0}};

struct rank_results {
    std::array<scored, nitems> best{};
    std::array<cplx, 2> product{};
};

} // namespace

int main() {
    std::array<rank_results, nranks> results{};

    try {
        chorus::run_threads(nranks, [&](chorus::communicator<chorus::threads>& comm) {
            const int r = comm.rank();
            rank_results& mine = results[std::size_t(r)];

            // arg-max over ranks, item by item, out of place.
            std::array<scored, nitems> mine_scored{};
            for (int i = 0; i < nitems; ++i) mine_scored[std::size_t(i)] = {scores[r][i], r};
            chorus::all_reduce(comm, std::span<const scored>(mine_scored), std::span<scored>(mine.best), arg_max{});

            // Complex product, in place. Element 0: unit rotations by (r + 1) pi / 15,
            // whose angles add up to pi, so the product is -1. Element 1: 1 + r i,
            // whose product over 5 ranks is -10 - 40i exactly (small integers).
            const double theta = (r + 1) * std::numbers::pi / 15.0;
            mine.product = {cplx{std::cos(theta), std::sin(theta)}, cplx{1.0, double(r)}};
            chorus::all_reduce(comm, std::span<cplx>(mine.product), complex_mul{});
        });
    } catch (const chorus::error& e) {
        std::printf("custom_operator: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::printf("custom_operator: error: %s\n", e.what());
        return 1;
    }

    int mismatches = 0;
    auto expect = [&](bool ok, int rank, const char* what) {
        if (!ok) {
            std::printf("MISMATCH on rank %d: %s\n", rank, what);
            ++mismatches;
        }
    };

    std::printf("arg_max over %d ranks (value, rank holding it), ties to the lower rank:\n", nranks);
    for (int r = 0; r < nranks; ++r) {
        std::printf("  rank %d:", r);
        for (int i = 0; i < nitems; ++i) {
            const scored s = results[std::size_t(r)].best[std::size_t(i)];
            std::printf("  item %d = (%.2f, rank %d)", i, double(s.value), s.index);
            expect(s.value == expected_best[i].value && s.index == expected_best[i].index, r, "arg_max");
        }
        std::printf("\n");
    }

    std::printf("complex product over %d ranks:\n", nranks);
    for (int r = 0; r < nranks; ++r) {
        const auto& p = results[std::size_t(r)].product;
        std::printf("  rank %d:  prod e^{i(r+1)pi/15} = %+.15f %+.15fi   prod (1 + ri) = %+g %+gi\n", r, p[0].re,
                    p[0].im, p[1].re, p[1].im);
        expect(std::abs(p[0].re + 1.0) < 1e-12 && std::abs(p[0].im) < 1e-12, r, "rotation product != -1");
        expect(p[1].re == -10.0 && p[1].im == -40.0, r, "integer product != -10 - 40i");
    }

    if (mismatches != 0) {
        std::printf("custom_operator: %d MISMATCH(es)\n", mismatches);
        return 1;
    }
    std::printf("custom_operator: OK\n");
    return 0;
}
