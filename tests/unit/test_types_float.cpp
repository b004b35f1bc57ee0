// Every collective against a serial reference for the floating-point and
// user element types (types_matrix.hpp has the matrix; test_types_int.cpp
// the integers), collectives with large counts (the streaming-store path),
// and hierarchical<> on one node.
#include "types_matrix.hpp"

TEST_CASE_TEMPLATE("collectives match a serial reference (ops x algorithms x counts x ranks x placement)", T, float,
                   double, indexed, vec3) {
    run_type_matrix<T>();
}

// --- large counts ---------------------------------------------------------------------------------

namespace {

#if CHORUS_TEST_TSAN
constexpr std::size_t big_count = 10007; // ThreadSanitizer: ~10x slower, keep it short
#else
constexpr std::size_t big_count = 1048583; // prime, just over 2^20: 8 MiB of doubles (the streaming-store path)
#endif

//! Large counts for one (type, operator): all_reduce on two algorithms, and
//! every other collective on ring<>; all-gather / reduce-scatter blocks are
//! big_count / n (odd) so the whole buffer stays around big_count elements.
template <class T, class Op>
void run_large(int n, failure_log& log) {
    const std::size_t block = (big_count / std::size_t(n)) | 1;
    std::vector<T> ref(std::max(big_count, block * std::size_t(n)));
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = reference<T>(Op{}, pattern_for<T, Op>(), n, i);
    chorus::run_threads(n, [&](comm_t& comm) {
        comm.set_timeout(std::chrono::seconds(120));
        ctx x{comm, log, n, comm.rank()};
        x.shared_ref = reinterpret_cast<const unsigned char*>(ref.data());
        x.k = std::uint64_t(n); // vary the offsets with n
        const named_policy ring_c2_64k{"ring<2ch,64KiB>", chorus::policy::fixed(chorus::algorithm::ring, {2, 64 << 10})};
        case_all_reduce<T>(x, ring_default, big_count, false, Op{});
        case_all_reduce<T>(x, ring_c2_64k, big_count, true, Op{});
        case_reduce_scatter<T>(x, ring_default, block, (n & 1) != 0, Op{});
        case_all_gather<T>(x, ring_c2_64k, block, (n & 1) == 0);
        case_broadcast<T>(x, ring_default, big_count);
        case_reduce<T>(x, ring_c2_64k, big_count, (n & 1) != 0, Op{});
    });
}

} // namespace

TEST_CASE("collectives with large counts match a serial reference") {
    // Each (type, operator) on a few rank counts only: every call moves
    // megabytes and the reference check reads them all.
    failure_log log;
    const auto t0 = steady::now();
    auto each = [&](std::initializer_list<int> ranks, auto&& run) {
        for (int n : ranks) {
            INFO("ranks = " << n);
            try {
                run(n);
            } catch (const std::exception& e) {
                FAIL_CHECK("run_threads(" << n << ") threw: " << std::string(e.what()));
            }
        }
    };
    each({1, 2, 3, 5, 8}, [&](int n) { run_large<float, chorus::sum>(n, log); });
    each({2, 3, 8}, [&](int n) { run_large<std::int32_t, chorus::max>(n, log); });
    each({1, 3, 5}, [&](int n) { run_large<double, chorus::avg>(n, log); });
    each({2, 5}, [&](int n) { run_large<indexed, argmax_op>(n, log); });
    each({3}, [&](int n) { run_large<vec3, vec3_add>(n, log); });
    MESSAGE("large counts (" << big_count << " elements): " << seconds_since(t0) << " s");
    log.report();
}

TEST_CASE("hierarchical<> on the threads backend (one node) runs its intra-node algorithm") {
    using hier = chorus::hierarchical<chorus::ring<chorus::ring_params{.channels = 2, .chunk_bytes = 64}>>;
    for (const int n : {1, 3, 4}) {
        CAPTURE(n);
        failure_log log;
        chorus::run_threads(n, [&](comm_t& comm) {
            const int r = comm.rank();
            constexpr std::size_t count = 1001;
            std::vector<float> in(count), out(count), all(count * std::size_t(n)), rs(count);
            for (std::size_t i = 0; i < count; ++i) in[i] = float(i % 7 + std::size_t(r));
            chorus::all_reduce<hier>(comm, std::span<const float>(in), std::span<float>(out));
            chorus::all_gather<hier>(comm, std::span<const float>(in), std::span<float>(all));
            for (std::size_t i = 0; i < count; ++i) {
                if (out[i] != float(n) * float(i % 7) + float(n * (n - 1) / 2)) log.add(std::string("all_reduce rank ") + std::to_string(r) + " element " + std::to_string(i));
                for (int q = 0; q < n; ++q)
                    if (all[std::size_t(q) * count + i] != float(i % 7 + std::size_t(q))) log.add(std::string("all_gather rank ") + std::to_string(r) + " element " + std::to_string(i));
            }
            chorus::reduce_scatter<hier>(comm, std::span<const float>(all), std::span<float>(rs));
            for (std::size_t i = 0; i < count; ++i)
                if (rs[i] != float(n) * all[std::size_t(r) * count + i]) log.add(std::string("reduce_scatter rank ") + std::to_string(r) + " element " + std::to_string(i));
            std::vector<float> b(in);
            chorus::broadcast<hier>(comm, std::span<float>(b), n - 1);
            for (std::size_t i = 0; i < count; ++i)
                if (b[i] != float(i % 7 + std::size_t(n - 1))) log.add(std::string("broadcast rank ") + std::to_string(r) + " element " + std::to_string(i));
        });
        log.report();
    }
}
