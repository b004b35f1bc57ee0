// hello_collectives: the first chorus program to run.
//
// Four ranks, each a thread of this process, hold the values 1, 2, 3, 4 and
// call the collectives every data-parallel program is built from:
//   all_reduce      every rank gets the sum            -> 10 everywhere
//   all_gather      every rank gets every rank's value -> [1 2 3 4] everywhere
//   reduce_scatter  block b of the sum goes to rank b
//   broadcast       rank 0's buffer copied to every rank
//   all_reduce_async, overlapped with local work, then wait()
//
// Ranks record what they received in arrays owned by main(); main() prints
// them in rank order after run_threads() has joined every rank, checks them,
// and prints "hello_collectives: OK" (exit 0) or the mismatches (exit 1).

#include <chorus/chorus.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <vector>

namespace {

constexpr int nranks = 4;

struct rank_results {
    int sum = 0;                         // all_reduce
    std::array<int, nranks> gathered{};  // all_gather
    int scattered = 0;                   // reduce_scatter: this rank's block
    std::array<int, 3> broadcasted{};    // broadcast from rank 0
    float async_avg = 0;                 // all_reduce_async with avg, first element
    bool async_all_equal = false;        // ... and every element the same
    double local_work = 0;               // what the rank computed meanwhile
};

std::string to_string(std::span<const int> v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i != 0) s += ' ';
        s += std::to_string(v[i]);
    }
    s += ']';
    return s;
}

// Stand-in for the computation a program overlaps with communication.
double local_work(int rank) {
    double acc = 0;
    for (int i = 1; i <= 200000; ++i) acc += std::sqrt(double(i + rank));
    return acc;
}

} // namespace

int main() {
    std::array<rank_results, nranks> results{};

    try {
        chorus::run_threads(nranks, [&](chorus::communicator<chorus::threads>& comm) {
            rank_results& mine = results[std::size_t(comm.rank())];
            const int value = comm.rank() + 1; // rank r holds r + 1

            // 1. all_reduce, out of place: one int in, one int out. Sum is the default operator.
            const std::array<int, 1> in{value};
            std::array<int, 1> out{};
            chorus::all_reduce(comm, std::span<const int>(in), std::span<int>(out), chorus::sum{});
            mine.sum = out[0];

            // 2. all_gather: block r of the output is rank r's input.
            chorus::all_gather(comm, std::span<const int>(in), std::span<int>(mine.gathered));

            // 3. reduce_scatter: every rank holds 4 blocks (here one element each),
            //    block b = (b + 1) * value; rank b receives block b summed over ranks.
            std::array<int, nranks> blocks{};
            for (int b = 0; b < nranks; ++b) blocks[std::size_t(b)] = (b + 1) * value;
            std::array<int, 1> my_block{};
            chorus::reduce_scatter(comm, std::span<const int>(blocks), std::span<int>(my_block), chorus::sum{});
            mine.scattered = my_block[0];

            // 4. broadcast, in place: rank 0's values overwrite everyone's buffer.
            std::array<int, 3> buf{};
            if (comm.rank() == 0) buf = {7, 8, 9};
            chorus::broadcast(comm, std::span<int>(buf), /*root=*/0);
            mine.broadcasted = buf;

            // 5. async all_reduce (in place, avg) overlapped with local work. The
            //    buffer must stay alive and untouched until the future is waited.
            std::vector<float> grad(1 << 20, float(value));
            chorus::future f = chorus::all_reduce_async(comm, std::span<float>(grad), chorus::avg{});
            mine.local_work = local_work(comm.rank()); // runs while the collective progresses
            f.wait();
            mine.async_avg = grad[0];
            mine.async_all_equal =
                std::all_of(grad.begin(), grad.end(), [&](float x) { return x == grad[0]; });

            chorus::barrier(comm); // everyone is done before run_threads returns (it joins anyway)
        });
    } catch (const chorus::error& e) {
        std::printf("hello_collectives: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::printf("hello_collectives: error: %s\n", e.what());
        return 1;
    }

    int mismatches = 0;
    auto expect = [&](bool ok, int rank, const char* what) {
        if (!ok) {
            std::printf("MISMATCH on rank %d: %s\n", rank, what);
            ++mismatches;
        }
    };

    std::printf("%d ranks (threads); rank r holds r + 1\n\n", nranks);
    std::printf("rank  all_reduce(sum)  all_gather   reduce_scatter  broadcast(root 0)  async avg\n");
    for (int r = 0; r < nranks; ++r) {
        const rank_results& x = results[std::size_t(r)];
        std::printf("%4d  %15d  %-11s  %14d  %-17s  %9.2f\n", r, x.sum, to_string(x.gathered).c_str(), x.scattered,
                    to_string(x.broadcasted).c_str(), double(x.async_avg));

        expect(x.sum == 10, r, "all_reduce sum != 10");
        expect(x.gathered == std::array<int, nranks>{1, 2, 3, 4}, r, "all_gather != [1 2 3 4]");
        expect(x.scattered == (r + 1) * 10, r, "reduce_scatter block != (rank + 1) * 10");
        expect(x.broadcasted == std::array<int, 3>{7, 8, 9}, r, "broadcast != [7 8 9]");
        expect(x.async_avg == 2.5f && x.async_all_equal, r, "async avg != 2.5 everywhere");
    }
    std::printf("\nreduce_scatter: every rank held blocks [1 2 3 4] * (r + 1); block b summed over ranks is\n"
                "(b + 1) * (1 + 2 + 3 + 4) = (b + 1) * 10, and rank b keeps block b.\n");

    if (mismatches != 0) {
        std::printf("hello_collectives: %d MISMATCH(es)\n", mismatches);
        return 1;
    }
    std::printf("hello_collectives: OK\n");
    return 0;
}
