// The strict-warnings consumer: every public host header, and one call of
// every collective (sync and async, every policy family, the training
// helpers), on communicator<threads> and, where MPI was found, on
// communicator<mpi>, compiled by the consumer's own flags
// (-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
// -Werror; CMakeLists.txt here), with std::plus<> and containers where
// spans go among them with chorus's headers on a plain -I path.
// The threads part runs; the MPI part runs when CHORUS_STRICT_RUN_MPI is
// set (it only has to compile here).
#include <chorus/chorus.hpp>
#include <chorus/train.hpp>
#if CHORUS_STRICT_MPI
#  include <chorus/mpi.hpp>
#endif

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <span>
#include <vector>

namespace {

// The README's headline tuning spelling, in the form every supported
// compiler accepts (g++, clang 14, nvcc).
using tuned_ring = chorus::ring<chorus::ring_params{.channels = 2, .chunk_bytes = 1 << 20}>;

struct arg_max { // a user type and operator
    float value;
    int index;
};
struct arg_max_op {
    static constexpr bool commutative = true;
    arg_max operator()(const arg_max& a, const arg_max& b) const {
        return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
    }
};

template <class Comm>
int every_collective(Comm& comm) {
    const int n = comm.size();
    const int r = comm.rank();
    const std::size_t un = static_cast<std::size_t>(n);
    int bad = 0;
    auto expect = [&bad](bool ok) { bad += ok ? 0 : 1; };

    std::vector<float> v(1000, float(r + 1));
    chorus::all_reduce(comm, std::span(v), chorus::sum{});
    expect(v[0] == float(n * (n + 1) / 2));
    chorus::all_reduce<chorus::ring<>>(comm, std::span(v), std::plus<>{});
    chorus::all_reduce<tuned_ring>(comm, std::span(v), chorus::max{});
    chorus::all_reduce<chorus::tree<>>(comm, std::span(v), chorus::min{});
    chorus::all_reduce<chorus::hierarchical<>>(comm, std::span(v), chorus::sum{});
    chorus::all_reduce<chorus::direct<>>(comm, std::span(v), chorus::avg{});
    chorus::all_reduce<chorus::recursive_doubling<>>(comm, std::span(v), chorus::prod{});
    chorus::all_reduce<chorus::rabenseifner<>>(comm, std::span(v), chorus::sum{});
    chorus::all_reduce<chorus::two_shot<>>(comm, std::span(v), chorus::sum{});
    chorus::all_reduce<chorus::deterministic<>>(comm, std::span(v), chorus::sum{});
    std::vector<std::int32_t> bits(64, r);
    chorus::all_reduce(comm, std::span(bits), chorus::bit_or{});
    std::vector<arg_max> am(8, arg_max{float(r), r});
    chorus::all_reduce(comm, std::span(am), arg_max_op{});
    expect(am[0].index == n - 1);

    std::vector<float> in(100, float(r)), gathered(100 * un), scattered(100);
    chorus::all_gather(comm, std::span<const float>(in), std::span(gathered));
    chorus::reduce_scatter(comm, std::span<const float>(gathered), std::span(scattered), chorus::sum{});
    chorus::broadcast(comm, std::span(in), 0);
    chorus::reduce(comm, std::span<const float>(in), std::span(scattered), chorus::sum{}, 0);
    std::vector<float> exchanged(100 * un);
    chorus::all_to_all(comm, std::span<const float>(gathered), std::span(exchanged));
    std::vector<std::size_t> counts(un, 3);
    std::vector<float> vin(3, 1.0f), vout(3 * un);
    chorus::all_gatherv(comm, std::span<const float>(vin), std::span(vout), std::span<const std::size_t>(counts));
    chorus::reduce_scatterv(comm, std::span<const float>(vout), std::span(vin), std::span<const std::size_t>(counts),
                            chorus::sum{});
    std::vector<std::size_t> matrix(un * un, 2);
    std::vector<float> ain(2 * un, 1.0f), aout(2 * un);
    chorus::all_to_allv(comm, std::span<const float>(ain), std::span(aout), std::span<const std::size_t>(matrix));
    if (n > 1) {
        std::vector<double> msg(16, double(r));
        if (r == 0) chorus::send(comm, std::span(msg), 1);
        if (r == 1) chorus::recv(comm, std::span(msg), 0);
    }
    chorus::barrier(comm);

    // The buffer forms: containers where spans go (collectives/buffers.hpp).
    chorus::all_reduce(comm, v);
    chorus::all_gather(comm, in, gathered);
    chorus::reduce_scatter(comm, gathered, scattered, std::plus<>{});

    chorus::future f = chorus::all_reduce_async(comm, std::span(v), chorus::sum{});
    chorus::future g = chorus::all_gather_async(comm, std::span<const float>(in), std::span(gathered));
    f.wait();
    g.wait();
    comm.synchronize();

    // The training helpers.
    chorus::train::gradient_accumulator<Comm, float> acc(comm, v.size(), 2);
    (void)acc;
    return bad;
}

} // namespace

int main() {
    std::atomic<int> bad{0};
    chorus::run_threads(4, [&](chorus::communicator<chorus::threads>& comm) { bad += every_collective(comm); });
#if CHORUS_STRICT_MPI
    if (std::getenv("CHORUS_STRICT_RUN_MPI") != nullptr) {
        int provided = 0;
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
        {
            chorus::communicator<chorus::mpi> comm(MPI_COMM_WORLD);
            bad += every_collective(comm);
        }
        MPI_Finalize();
    }
#endif
    std::puts(bad == 0 ? "strict consumer: ok" : "strict consumer: WRONG results");
    return bad == 0 ? 0 : 1;
}
