// The cost model (include/chorus/model/cost.hpp): the schedules' terms, the
// properties the selector relies on (monotone, ring wins large messages,
// one-step algorithms win small ones, hierarchical wins across nodes),
// extreme rank counts, and the topology file: round trip and errors that
// name the file, the line and the key.

#include <chorus/algo/automatic.hpp>
#include <chorus/model/cost.hpp>
#include <chorus/model/file.hpp>
#include <chorus/model/fit.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using chorus::collective;
namespace model = chorus::model;
using model::algorithm;

constexpr collective model_collectives[] = {
    collective::all_reduce, collective::all_gather,  collective::reduce_scatter,  collective::broadcast,
    collective::reduce,     collective::all_to_all,  collective::all_gatherv,     collective::reduce_scatterv,
    collective::all_to_allv};

model::topology cluster() { return model::gpu_cluster_topology(8); }

//! The message of the chorus::error `f` throws ("" if it throws none).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const chorus::error& e) {
        CHECK(e.code() == chorus::errc::invalid_argument);
        return e.what();
    }
    return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Usable at compile time and in the selector's hot path.
static_assert(model::predict(collective::all_reduce, algorithm::ring, 8, 1 << 20, model::topology{}) > 0);
static_assert(model::best(collective::all_reduce, 8, 8, model::topology{}) != algorithm::ring);
static_assert(noexcept(model::predict(collective::all_reduce, algorithm::tree, 8, 1.0, model::topology{})));

} // namespace

TEST_CASE("model: algorithm names match the policies") {
    CHECK(std::string(model::algorithm_name(algorithm::ring)) == "ring");
    CHECK(std::string(model::algorithm_name(algorithm::recursive_doubling)) == "recursive_doubling");
    CHECK(std::string(model::algorithm_name(algorithm::two_shot)) == "two_shot");
    CHECK(model::algorithm_count == 7);
    for (algorithm a : model::all_algorithms) {
        algorithm back{};
        CHECK(model::algorithm_from_name(model::algorithm_name(a), back));
        CHECK(back == a);
    }
    algorithm x{};
    CHECK_FALSE(model::algorithm_from_name("automatic", x));
}

TEST_CASE("model: the schedules' steps, bytes moved and bytes reduced") {
    const model::topology t{};
    const double S = 4096;
    auto terms = [&](collective c, algorithm a, int n, double bytes = 4096) {
        return model::decompose(c, a, n, bytes, t).intra;
    };
    // ring AllReduce, n = 4: 6 steps, 2 * 3/4 S moved, 3/4 S reduced.
    model::terms r = terms(collective::all_reduce, algorithm::ring, 4);
    CHECK(r.steps == 6);
    CHECK(r.moved == doctest::Approx(1.5 * S));
    CHECK(r.reduced == doctest::Approx(0.75 * S));
    r = terms(collective::all_gather, algorithm::ring, 4);
    CHECK(r.steps == 3);
    CHECK(r.moved == doctest::Approx(0.75 * S));
    CHECK(r.reduced == 0);
    // direct AllReduce: one step, reads n S, reduces (n-1) S.
    r = terms(collective::all_reduce, algorithm::direct, 4);
    CHECK(r.steps == 1);
    CHECK(r.moved == doctest::Approx(4 * S));
    CHECK(r.reduced == doctest::Approx(3 * S));
    // two-shot: 2 steps.
    r = terms(collective::all_reduce, algorithm::two_shot, 4);
    CHECK(r.steps == 2);
    CHECK(r.moved == doctest::Approx(S + 0.75 * S));
    // recursive doubling: log2 p rounds of S, plus the fix-up when n is not a power of two.
    r = terms(collective::all_reduce, algorithm::recursive_doubling, 8);
    CHECK(r.steps == 3);
    CHECK(r.moved == doctest::Approx(3 * S));
    r = terms(collective::all_reduce, algorithm::recursive_doubling, 6);
    CHECK(r.steps == 2 + 2);
    CHECK(r.moved == doctest::Approx(2 * S + 2 * S));
    CHECK(r.reduced == doctest::Approx(2 * S + S));
    // Rabenseifner: 2 log2 p steps, ring's bytes over p.
    r = terms(collective::all_reduce, algorithm::rabenseifner, 8);
    CHECK(r.steps == 6);
    CHECK(r.moved == doctest::Approx(2 * 7.0 / 8 * S));
    r = terms(collective::all_reduce, algorithm::rabenseifner, 5);
    CHECK(r.steps == 4 + 2);
    // tree: depth floor(log2 n), chunks of S/2, reduce up and broadcast down.
    const double big = 8.0 * 256 * 1024; // 2 chunks per tree at the default 256 KiB
    r = terms(collective::all_reduce, algorithm::tree, 8, big);
    CHECK(r.steps == 2 * 3 + 2 * (4 - 1));
    CHECK(r.moved == doctest::Approx(2 * big));
    CHECK(r.reduced == doctest::Approx(big));
    r = terms(collective::broadcast, algorithm::tree, 8, big);
    CHECK(r.steps == 3 + 4 - 1);
    CHECK(r.reduced == 0);
    // ring Broadcast: a pipelined chain of chunks.
    r = terms(collective::broadcast, algorithm::ring, 5, big);
    CHECK(r.steps == 4 + 8 - 1);
    // exchange collectives: one step, (n-1)/n S, whatever the algorithm.
    for (algorithm a : model::all_algorithms) {
        r = terms(collective::all_to_all, a, 4);
        CHECK(r.steps == 1);
        CHECK(r.moved == doctest::Approx(0.75 * S));
    }
}

TEST_CASE("model: predictions grow with the message size") {
    model::topology split = model::topology{};
    split.ranks_per_node = 4;
    for (const model::topology& t : {model::topology{}, cluster(), split})
        for (collective c : model_collectives)
            for (algorithm a : model::all_algorithms)
                for (int n : {1, 2, 3, 4, 7, 8, 16, 24, 64}) {
                    double prev = model::predict(c, a, n, 0, t);
                    CHECK(prev >= 0);
                    for (double S = 1; S <= 64.0 * 1024 * 1024 * 1024; S *= 2) {
                        const double now = model::predict(c, a, n, S, t);
                        INFO(chorus::collective_name(c), " ", model::algorithm_name(a), " n=", n, " S=", S);
                        REQUIRE(now >= prev);
                        prev = now;
                    }
                }
}

TEST_CASE("model: ring wins large messages and one-step algorithms win small ones") {
    const model::topology t = model::default_topology();
    for (int n : {2, 4, 8, 16}) {
        INFO("n=", n);
        const double big = 64.0 * 1024 * 1024;
        CHECK(model::predict(collective::all_reduce, algorithm::ring, n, big, t) <
              model::predict(collective::all_reduce, algorithm::direct, n, big, t));
        CHECK(model::predict(collective::all_reduce, algorithm::ring, n, big, t) <
              model::predict(collective::all_reduce, algorithm::recursive_doubling, n, big, t));
        const double small = 8;
        CHECK(model::predict(collective::all_reduce, algorithm::direct, n, small, t) <
              model::predict(collective::all_reduce, algorithm::ring, n, small, t));
        if (n > 2) // at n = 2 ring is one exchange too: 2 steps against recursive doubling's 1 (equal bytes)
            CHECK(model::predict(collective::all_reduce, algorithm::recursive_doubling, n, small, t) <
                  model::predict(collective::all_reduce, algorithm::ring, n, small, t));
        const algorithm tiny = model::best(collective::all_reduce, n, small, t);
        CHECK((tiny == algorithm::direct || tiny == algorithm::recursive_doubling)); // n = 2: rd reads less
        const algorithm large = model::best(collective::all_reduce, n, big, t);
        CHECK((large == algorithm::ring || large == algorithm::rabenseifner || large == algorithm::two_shot ||
               large == algorithm::hierarchical));
    }
}

TEST_CASE("model: hierarchical beats a flat ring across nodes") {
    // Hosts whose ranks share one slower NIC (per-rank inter bandwidth below the memory's).
    model::topology host = model::default_topology();
    host.ranks_per_node = 4;
    host.inter = {5e-6, 25e9 / 4};
    for (const model::topology& t : {cluster(), host})
        for (int nodes : {2, 4, 16, 512})
            for (double S : {1.0 * 1024 * 1024, 64.0 * 1024 * 1024, 1024.0 * 1024 * 1024}) {
                const int n = nodes * t.ranks_per_node;
                INFO("n=", n, " S=", S);
                CHECK(model::predict(collective::all_reduce, algorithm::hierarchical, n, S, t) <
                      model::predict(collective::all_reduce, algorithm::ring, n, S, t));
            }
    // Its phases: intra reduce-scatter + all-gather on the intra link, a ring of S/L on the inter link.
    const model::breakdown b = model::decompose(collective::all_reduce, algorithm::hierarchical, 16, 8192, cluster());
    CHECK(b.intra.steps == 2 * 7);
    CHECK(b.intra.moved == doctest::Approx(2 * 7.0 / 8 * 8192));
    CHECK(b.inter.steps == 2);
    CHECK(b.inter.moved == doctest::Approx(1024));
    // A flat algorithm across nodes runs at the inter link only.
    const model::breakdown f = model::decompose(collective::all_reduce, algorithm::ring, 16, 8192, cluster());
    CHECK(f.intra.steps == 0);
    CHECK(f.inter.steps == 30);
    // Within one node, or with ranks that do not fill whole nodes, hierarchical is the ring.
    for (int n : {8, 12})
        CHECK(model::predict(collective::all_reduce, algorithm::hierarchical, n, 1e6, cluster()) ==
              model::predict(collective::all_reduce, algorithm::ring, n, 1e6, cluster()));
    // Crossing the node boundary costs: 16 ranks on 2 nodes are slower than 8 on one.
    CHECK(model::predict(collective::all_reduce, model::best(collective::all_reduce, 16, 256e6, cluster()), 16, 256e6,
                         cluster()) >
          model::predict(collective::all_reduce, model::best(collective::all_reduce, 8, 256e6, cluster()), 8, 256e6,
                         cluster()));
}

TEST_CASE("model: one rank is a local copy") {
    const model::topology t = model::default_topology();
    for (collective c : model_collectives)
        for (algorithm a : model::all_algorithms)
            CHECK(model::predict(c, a, 1, 1e6, t) == doctest::Approx(1e6 / t.intra.bandwidth_Bps));
    CHECK(model::predict(collective::barrier, algorithm::ring, 1, 0, t) == 0);
    const model::prediction p = model::evaluate(collective::all_reduce, algorithm::ring, 1, 1e6, t);
    CHECK(p.busbw_Bps == 0); // nccl-tests: 2(n-1)/n = 0
    CHECK(p.algbw_Bps == doctest::Approx(t.intra.bandwidth_Bps));
}

TEST_CASE("model: 4096 ranks give finite predictions") {
    model::topology flat = model::default_topology();
    for (const model::topology& t : {cluster(), flat})
        for (collective c : model_collectives)
            for (algorithm a : model::all_algorithms)
                for (double S : {0.0, 8.0, 1e6, 1e9, 1e12}) {
                    const double s = model::predict(c, a, 4096, S, t);
                    INFO(chorus::collective_name(c), " ", model::algorithm_name(a), " S=", S);
                    CHECK(std::isfinite(s));
                    CHECK(s > 0);
                }
    CHECK(model::best(collective::all_reduce, 4096, 256e6, cluster()) == algorithm::hierarchical);
}

TEST_CASE("model: bus bandwidth follows nccl-tests") {
    const model::topology t = cluster();
    const model::prediction p = model::evaluate(collective::all_reduce, algorithm::ring, 8, 1e9, t);
    CHECK(p.algbw_Bps == doctest::Approx(1e9 / p.seconds));
    CHECK(p.busbw_Bps == doctest::Approx(p.algbw_Bps * 2 * 7 / 8));
    CHECK(model::bus_factor(collective::all_gather, 4) == doctest::Approx(0.75));
    CHECK(model::bus_factor(collective::broadcast, 4) == 1);
    // A ring's bus bandwidth approaches the link bandwidth for large messages
    // (when reductions and its local copies cost nothing).
    model::topology fast_reduce = t;
    fast_reduce.reduce_Bps = 1e18;
    fast_reduce.local_Bps = 1e18;
    const model::prediction big = model::evaluate(collective::all_reduce, algorithm::ring, 8, 1e12, fast_reduce);
    CHECK(big.busbw_Bps == doctest::Approx(t.intra.bandwidth_Bps).epsilon(0.01));
}

TEST_CASE("model: best picks the least predicted time among the candidates") {
    const model::topology t = model::default_topology();
    const algorithm only_ring[] = {algorithm::ring};
    CHECK(model::best(collective::all_reduce, 8, 8, t, only_ring, 1) == algorithm::ring);
    CHECK(model::best(collective::all_reduce, 8, 8, t, nullptr, 0) == algorithm::ring);
    const algorithm two[] = {algorithm::ring, algorithm::direct};
    CHECK(model::best(collective::all_reduce, 8, 8, t, two, 2) == algorithm::direct);
    CHECK(model::best(collective::all_reduce, 8, 64e6, t, two, 2) == algorithm::ring);
    for (double S : {8.0, 4096.0, 1e6, 1e8}) {
        const algorithm w = model::best(collective::all_reduce, 6, S, t);
        for (algorithm a : model::all_algorithms)
            CHECK(model::predict(collective::all_reduce, w, 6, S, t) <=
                  model::predict(collective::all_reduce, a, 6, S, t));
    }
}

TEST_CASE("model: to_text and parse round-trip") {
    model::topology t{};
    t.ranks_per_node = 6;
    t.intra = {1.0 / 3 * 1e-6, 123456789.125};
    t.inter = {7.25e-6, 1e10 / 3};
    t.reduce_Bps = 2.5e9 + 0.1;
    t.channels = 4;
    t.chunk_bytes = 65536;
    const std::string text = model::to_text(t);
    CHECK(text.rfind("# ", 0) == 0); // a comment header
    const model::topology u = model::parse(text, "round-trip");
    CHECK(u.ranks_per_node == t.ranks_per_node);
    CHECK(u.intra.latency_s == t.intra.latency_s);
    CHECK(u.intra.bandwidth_Bps == t.intra.bandwidth_Bps);
    CHECK(u.inter.latency_s == t.inter.latency_s);
    CHECK(u.inter.bandwidth_Bps == t.inter.bandwidth_Bps);
    CHECK(u.reduce_Bps == t.reduce_Bps);
    CHECK(u.channels == t.channels);
    CHECK(u.chunk_bytes == t.chunk_bytes);
    CHECK(model::to_text(u) == text);

    // Comments, blank lines, spaces and a partial file (the rest keeps the defaults).
    const model::topology p = model::parse("\n  # header\n\tintra.latency_s=2e-6  # trailing\r\n\nchannels = 2\n", "x");
    CHECK(p.intra.latency_s == 2e-6);
    CHECK(p.channels == 2);
    CHECK(p.intra.bandwidth_Bps == model::default_topology().intra.bandwidth_Bps);
    CHECK(p.ranks_per_node == 0);
}

TEST_CASE("model: bad topology files name the file, the line and the key") {
    std::string m = error_of([] { model::parse("channels = 1\nbogus = 3\n", "my.model"); });
    CHECK(contains(m, "'my.model'"));
    CHECK(contains(m, "line 2"));
    CHECK(contains(m, "'bogus'"));
    CHECK(contains(m, "unknown key"));

    m = error_of([] { model::parse("# c\n\nintra.bandwidth_Bps = fast\n", "a.txt"); });
    CHECK(contains(m, "'a.txt'"));
    CHECK(contains(m, "line 3"));
    CHECK(contains(m, "'intra.bandwidth_Bps'"));
    CHECK(contains(m, "'fast'"));

    m = error_of([] { model::parse("reduce_Bps = 0\n", "z"); });
    CHECK(contains(m, "line 1"));
    CHECK(contains(m, "'reduce_Bps'"));
    CHECK(contains(m, "> 0"));

    m = error_of([] { model::parse("inter.latency_s = -1e-6\n", "z"); });
    CHECK(contains(m, "'inter.latency_s'"));

    m = error_of([] { model::parse("channels = 1.5\n", "z"); });
    CHECK(contains(m, "'channels'"));
    CHECK(contains(m, "whole number"));

    m = error_of([] { model::parse("channels = 2\nchannels = 3\n", "z"); });
    CHECK(contains(m, "line 2"));
    CHECK(contains(m, "twice"));

    m = error_of([] { model::parse("intra.latency_s 1e-6\n", "z"); });
    CHECK(contains(m, "line 1"));
    CHECK(contains(m, "key = value"));

    m = error_of([] { model::parse("intra.latency_s = 1e-6 2\n", "z"); });
    CHECK(contains(m, "'intra.latency_s'"));

    m = error_of([] { model::load_file("no/such/dir/chorus.model"); });
    CHECK(contains(m, "no/such/dir/chorus.model"));
}

TEST_CASE("model: load_file reads what to_text wrote") {
    const std::string path = "chorus_test_model.txt";
    model::topology t = cluster();
    t.intra.latency_s = 3e-6;
    {
        std::ofstream out(path);
        out << model::to_text(t);
    }
    const model::topology u = model::load_file(path);
    std::remove(path.c_str());
    CHECK(u.ranks_per_node == 8);
    CHECK(u.intra.latency_s == 3e-6);
    CHECK(u.reduce_Bps == t.reduce_Bps);
}

TEST_CASE("model: a direct broadcast is bounded by the root's link") {
    const model::topology t = cluster();
    const model::breakdown b = model::decompose(collective::broadcast, algorithm::direct, 32, 1000, t);
    CHECK(b.inter.moved == doctest::Approx(31 * 1000));
    CHECK(model::predict(collective::broadcast, algorithm::tree, 32, 256e6, t) <
          model::predict(collective::broadcast, algorithm::direct, 32, 256e6, t));
    CHECK(model::predict(collective::broadcast, algorithm::ring, 32, 256e6, t) <
          model::predict(collective::broadcast, algorithm::direct, 32, 256e6, t));
    CHECK(model::predict(collective::broadcast, algorithm::direct, 32, 8, t) <
          model::predict(collective::broadcast, algorithm::ring, 32, 8, t));
}

TEST_CASE("model: local bytes of AllReduce per algorithm, and what each policy runs elsewhere") {
    const model::topology t{};
    const double S = 4096;
    auto local = [&](algorithm a, int n) { return model::decompose(collective::all_reduce, a, n, S, t).intra.local; };
    CHECK(local(algorithm::ring, 4) == doctest::Approx(2 * S));   // (3n - 4) / n S
    CHECK(local(algorithm::ring, 2) == doctest::Approx(S));
    CHECK(local(algorithm::direct, 4) == doctest::Approx(S));
    CHECK(local(algorithm::two_shot, 4) == doctest::Approx(S));
    CHECK(local(algorithm::recursive_doubling, 8) == doctest::Approx(6 * S));   // 2 log2 n S
    CHECK(local(algorithm::recursive_doubling, 6) == doctest::Approx(4 * S + 2 * S)); // + the fold
    CHECK(local(algorithm::rabenseifner, 8) == doctest::Approx(3 * 7.0 / 8 * S));
    CHECK(local(algorithm::tree, 8) == doctest::Approx(2 * S));
    // Local bytes cost the link's bandwidth unless local_Bps says otherwise.
    model::topology fast = t;
    fast.local_Bps = 1e15;
    CHECK(model::predict(collective::all_reduce, algorithm::ring, 4, S, fast) <
          model::predict(collective::all_reduce, algorithm::ring, 4, S, t));
    // Only AllReduce differs by policy; elsewhere they run one of the others.
    CHECK(model::runs_as(collective::broadcast, algorithm::rabenseifner) == algorithm::direct);
    CHECK(model::runs_as(collective::all_gather, algorithm::tree) == algorithm::ring);
    CHECK(model::runs_as(collective::reduce, algorithm::tree) == algorithm::tree);
    CHECK(model::runs_as(collective::reduce_scatter, algorithm::hierarchical) == algorithm::ring);
    CHECK(model::runs_as(collective::all_reduce, algorithm::two_shot) == algorithm::two_shot);
    for (collective c : {collective::all_gather, collective::reduce_scatter, collective::broadcast, collective::reduce})
        for (algorithm a : model::all_algorithms) {
            INFO(chorus::collective_name(c), " ", model::algorithm_name(a));
            CHECK(model::predict(c, a, 6, 1 << 20, t) ==
                  doctest::Approx(model::predict(c, model::runs_as(c, a), 6, 1 << 20, t)));
        }
}

TEST_CASE("model: corrections scale predictions, interpolated between grid sizes") {
    model::topology t{};
    const double base = model::predict(collective::all_reduce, algorithm::ring, 4, 8192, t);
    t.correction_count = 1;
    model::correction& k = t.corrections[0];
    k.coll = collective::all_reduce;
    k.algo = algorithm::ring;
    k.nranks = 4;
    for (int i = 0; i < model::correction_points; ++i) k.ratio[i] = float(1 + i);
    CHECK(model::correction::grid_bytes(0) == 8);
    CHECK(model::correction::grid_bytes(12) == 128.0 * 1024 * 1024);
    CHECK(k.at(1) == 1);                                   // below the grid: the first
    CHECK(k.at(8192) == doctest::Approx(6));               // 8 * 4^5 exactly
    CHECK(k.at(8192 + 0.5 * (32768 - 8192)) == doctest::Approx(6.5));
    CHECK(k.at(1e12) == 13);                               // above: the last
    CHECK(model::predict(collective::all_reduce, algorithm::ring, 4, 8192, t) == doctest::Approx(6 * base));
    CHECK(model::predict_uncorrected(collective::all_reduce, algorithm::ring, 4, 8192, t) == doctest::Approx(base));
    // Another rank count, algorithm or collective: no correction.
    CHECK(model::predict(collective::all_reduce, algorithm::ring, 8, 8192, t) ==
          doctest::Approx(model::predict_uncorrected(collective::all_reduce, algorithm::ring, 8, 8192, t)));
    CHECK(t.correction_at(collective::all_reduce, algorithm::direct, 4, 8192) == 1);
    CHECK(t.correction_at(collective::all_gather, algorithm::ring, 4, 8192) == 1);
    // A policy that runs another's schedule takes that one's correction.
    k.coll = collective::broadcast;
    k.algo = algorithm::direct;
    CHECK(model::predict(collective::broadcast, algorithm::two_shot, 4, 8192, t) ==
          doctest::Approx(6 * model::predict_uncorrected(collective::broadcast, algorithm::direct, 4, 8192, t)));
}

TEST_CASE("model: corrections, local_Bps and flat_inter round-trip through the file") {
    model::topology t{};
    t.local_Bps = 3e12;
    t.flat_inter = true;
    t.correction_count = 2;
    t.corrections[0] = {collective::all_reduce, algorithm::two_shot, 4, {}};
    t.corrections[1] = {collective::reduce, algorithm::tree, 2, {}};
    for (int i = 0; i < model::correction_points; ++i) {
        t.corrections[0].ratio[i] = 1.0f / float(i + 3);
        t.corrections[1].ratio[i] = 0.5f + float(i);
    }
    const std::string text = model::to_text(t);
    CHECK(contains(text, "correction.all_reduce.two_shot.n4 = "));
    CHECK(contains(text, "correction.reduce.tree.n2 = "));
    const model::topology u = model::parse(text, "rt");
    CHECK(u.local_Bps == 3e12);
    CHECK(u.flat_inter);
    REQUIRE(u.correction_count == 2);
    for (int j = 0; j < 2; ++j) {
        CHECK(u.corrections[j].coll == t.corrections[j].coll);
        CHECK(u.corrections[j].algo == t.corrections[j].algo);
        CHECK(u.corrections[j].nranks == t.corrections[j].nranks);
        for (int i = 0; i < model::correction_points; ++i) CHECK(u.corrections[j].ratio[i] == t.corrections[j].ratio[i]);
    }
    CHECK(model::to_text(u) == text);

    const std::string ones = " 1 1 1 1 1 1 1 1 1 1 1 1 1\n";
    std::string m = error_of([] { model::parse("correction.all_reduce.ring.n4 = 1 2\n", "c.txt"); });
    CHECK(contains(m, "'c.txt'"));
    CHECK(contains(m, "'correction.all_reduce.ring.n4'"));
    CHECK(contains(m, "13 ratios, got 2"));
    m = error_of([&] { model::parse("correction.all_reduce.bogus.n4 =" + ones, "c"); });
    CHECK(contains(m, "unknown algorithm 'bogus'"));
    m = error_of([&] { model::parse("correction.gather.ring.n4 =" + ones, "c"); });
    CHECK(contains(m, "unknown collective 'gather'"));
    m = error_of([&] { model::parse("correction.all_reduce.ring.4 =" + ones, "c"); });
    CHECK(contains(m, "n<ranks>"));
    m = error_of([&] { model::parse("correction.all_reduce.ring.n4 =" + ones + "correction.all_reduce.ring.n4 =" + ones, "c"); });
    CHECK(contains(m, "line 2"));
    CHECK(contains(m, "twice"));
    m = error_of([] { model::parse("correction.all_reduce.ring.n4 = 1 1 1 1 1 1 0 1 1 1 1 1 1\n", "c"); });
    CHECK(contains(m, "ratios > 0"));
    m = error_of([] { model::parse("flat_inter = 2\n", "c"); });
    CHECK(contains(m, "'flat_inter'"));
}

TEST_CASE("model: with flat_inter (MPI) flat schedules pay the inter link, hierarchical's node phases the intra") {
    const model::topology one_host = model::mpi_topology(4, false);
    CHECK(one_host.flat_inter);
    const double S = 16.0 * 1024 * 1024;
    // One node of 4: ring is point-to-point, hierarchical runs on shared memory.
    const model::breakdown ring = model::decompose(collective::all_reduce, algorithm::ring, 4, S, one_host);
    CHECK(ring.intra.steps == 0);
    CHECK(ring.inter.steps == 6);
    const model::breakdown hier = model::decompose(collective::all_reduce, algorithm::hierarchical, 4, S, one_host);
    CHECK(hier.intra.steps == 6);
    CHECK(hier.inter.steps == 0);
    CHECK(model::best(collective::all_reduce, 4, S, one_host) == algorithm::hierarchical);
    // The other collectives' hierarchical<> runs its intra ring flat: point-to-point.
    CHECK(model::decompose(collective::all_gather, algorithm::hierarchical, 4, S, one_host).inter.steps == 3);
    CHECK(model::decompose(collective::all_gather, algorithm::hierarchical, 4, S, one_host).intra.steps == 0);
    // Two nodes of 2: hierarchical crosses the inter link once per node group.
    const model::topology two = model::mpi_topology(2, true);
    const model::breakdown h2 = model::decompose(collective::all_reduce, algorithm::hierarchical, 4, S, two);
    CHECK(h2.intra.steps == 2);
    CHECK(h2.inter.steps == 2);
    CHECK(two.inter.bandwidth_Bps == model::infiniband_class_link.bandwidth_Bps);
}

TEST_CASE("automatic: the pick follows the topology it is given, its scratch limit and the operator") {
    chorus::schedule_args a{collective::all_reduce, 0, 4, 0, 1 << 20, 4, false, 0};
    const model::topology t{};
    a.topo = &t;
    const algorithm first = chorus::automatic::choose(a);
    CHECK(first == model::best(collective::all_reduce, 4, 4.0 * (1 << 20), t,
                               std::array{algorithm::direct, algorithm::two_shot, algorithm::recursive_doubling,
                                          algorithm::rabenseifner, algorithm::ring, algorithm::tree}
                                   .data(),
                               6));
    CHECK(chorus::automatic::choose(a) == first); // remembered
    // Another topology (a topology must not change while calls use it):
    // two_shot made far cheaper than anything else by a correction.
    auto favouring = [](algorithm x) {
        model::topology u{};
        u.correction_count = 1;
        u.corrections[0] = {collective::all_reduce, x, 4, {}};
        for (float& r : u.corrections[0].ratio) r = 1e-6f;
        return u;
    };
    const model::topology two = favouring(algorithm::two_shot);
    a.topo = &two;
    CHECK(chorus::automatic::choose(a) == algorithm::two_shot);
    CHECK(chorus::make_schedule<chorus::automatic>(a).kind == chorus::schedule_kind::two_shot);
    // A scratch limit leaves out what needs more: recursive doubling keeps a
    // whole vector of partials.
    const model::topology rd = favouring(algorithm::recursive_doubling);
    a.topo = &rd;
    CHECK(chorus::automatic::choose(a) == algorithm::recursive_doubling);
    a.scratch_limit_bytes = 1024;
    const algorithm limited = chorus::automatic::choose(a);
    CHECK(limited != algorithm::recursive_doubling);
    CHECK(chorus::make_schedule<chorus::automatic>(a).scratch_elems() * 4 <= 1024);
    // Non-commutative operators never get an operand-reordering algorithm.
    a.scratch_limit_bytes = 0;
    a.commutative = false;
    const model::topology ring = favouring(algorithm::ring);
    a.topo = &ring;
    CHECK(chorus::automatic::choose(a) != algorithm::ring);
    a.commutative = true;
    CHECK(chorus::automatic::choose(a) == algorithm::ring);
    // On MPI (flat_inter), one node is a split: hierarchical<> is a candidate and wins large messages.
    const model::topology mpi = model::mpi_topology(4, false);
    a.topo = &mpi;
    a.node_size = 4;
    a.count = 4 << 20;
    CHECK(chorus::automatic::choose(a) == algorithm::hierarchical);
    a.coll = collective::all_gather; // AllReduce only: the others would run its ring flat
    CHECK(chorus::automatic::choose(a) != algorithm::hierarchical);
    a.coll = collective::all_reduce;
    model::topology no_split = mpi; // no node split known: not a candidate
    no_split.ranks_per_node = 0;
    a.topo = &no_split;
    a.node_size = 0;
    CHECK(chorus::automatic::choose(a) != algorithm::hierarchical);
}

TEST_CASE("calibration: corrections fitted to measurements move automatic's crossover, and survive the file") {
    // Synthetic measurements of 8 GPU ranks (what chorus_calibrate_gpu feeds
    // fit_correction): direct<> 20 us + S / 50 GB/s, two_shot<> 60 us +
    // S / 100 GB/s, so two_shot<> is faster from S = 4 MB on; the logarithmic
    // ones far slower. The first-order GPU model alone switches far earlier.
    const model::topology base = model::gpu_cluster_topology(0);
    auto direct_s = [](double S) { return 20e-6 + S / 50e9; };
    auto two_shot_s = [](double S) { return 60e-6 + S / 100e9; };
    std::vector<model::measurement> md, mt, slow;
    for (int i = 0; i < model::correction_points; ++i) {
        const double S = model::correction::grid_bytes(i);
        md.push_back({S, direct_s(S)});
        mt.push_back({S, two_shot_s(S)});
        slow.push_back({S, 1.0});
    }
    chorus::schedule_args a{collective::all_reduce, 0, 8, 0, 0, 4, false, 0};
    a.commutative = false; // candidates: direct, two_shot, recursive_doubling, rabenseifner
    a.channel_budget = 32;
    auto first_two_shot = [&a](const model::topology& t) { // the least size (x 2 steps) automatic runs two_shot at
        a.topo = &t;
        for (std::uint64_t bytes = 64; bytes <= (std::uint64_t(1) << 30); bytes *= 2) {
            a.count = bytes / 4;
            if (chorus::automatic::choose(a) == algorithm::two_shot) return bytes;
        }
        return std::uint64_t(0);
    };
    const std::uint64_t before = first_two_shot(base);
    CHECK(before > 0);
    CHECK(before <= (256u << 10)); // the built-in GPU model switches at tens of KiB
    model::topology t = base;
    for (const auto& [algo, m] : {std::pair{algorithm::direct, &md}, std::pair{algorithm::two_shot, &mt},
                                  std::pair{algorithm::recursive_doubling, &slow},
                                  std::pair{algorithm::rabenseifner, &slow}}) {
        model::correction k{};
        REQUIRE(model::fit_correction(base, collective::all_reduce, algo, 8, 0, *m, k));
        model::set_correction(t, k);
    }
    CHECK(t.correction_count == 4);
    // The calibrated model reproduces the measurements at the grid sizes.
    for (int i = 0; i < model::correction_points; ++i) {
        const double S = model::correction::grid_bytes(i);
        CHECK(model::predict(collective::all_reduce, algorithm::direct, 8, S, t) == doctest::Approx(direct_s(S)).epsilon(1e-5));
        CHECK(model::predict(collective::all_reduce, algorithm::two_shot, 8, S, t) ==
              doctest::Approx(two_shot_s(S)).epsilon(1e-5));
    }
    // The crossover moved to where the measurements put it (4 MB, between the grid sizes 2 MiB and
    // 8 MiB: the interpolated corrections place it within that step).
    const std::uint64_t after = first_two_shot(t);
    MESSAGE("automatic's direct -> two_shot crossover: built-in GPU model " << before << " B, calibrated " << after
                                                                              << " B");
    CHECK(after >= (2u << 20));
    CHECK(after <= (8u << 20));
    // Through the model file (what automatic loads via CHORUS_MODEL): the same picks.
    const model::topology back = model::parse(model::to_text(t), "calibrated");
    REQUIRE(back.correction_count == 4);
    for (int i = 0; i < 4; ++i)
        for (int g = 0; g < model::correction_points; ++g)
            CHECK(back.corrections[i].ratio[g] == t.corrections[i].ratio[g]);
    CHECK(first_two_shot(back) == after);
    // Refitting replaces the correction of the same key; other rank counts are kept apart.
    model::correction k{};
    REQUIRE(model::fit_correction(base, collective::all_reduce, algorithm::direct, 8, 0, mt, k));
    model::set_correction(t, k);
    CHECK(t.correction_count == 4);
    REQUIRE(model::fit_correction(base, collective::all_reduce, algorithm::direct, 4, 0, md, k));
    model::set_correction(t, k);
    CHECK(t.correction_count == 5);
}

TEST_CASE("calibration: fit_correction's grid, gaps and refusals") {
    const model::topology base = model::gpu_cluster_topology(0);
    CHECK(model::correction_index(8) == 0);
    CHECK(model::correction_index(8192) == 5);
    CHECK(model::correction_index(10000) == 5);
    CHECK(model::correction_index(128.0 * 1024 * 1024) == 12);
    CHECK(model::correction_index(1e12) == -1); // far above the grid
    CHECK(model::correction_index(0) == -1);
    // Two measurements (32 B and 32 KiB): every other grid point repeats the nearest.
    const double p32 = model::predict_uncorrected(collective::all_reduce, algorithm::ring, 8, 32, base, 0);
    const double p32k = model::predict_uncorrected(collective::all_reduce, algorithm::ring, 8, 32768, base, 0);
    const model::measurement m[] = {{32, 2 * p32}, {32768, 3 * p32k}, {32, -1.0}, {5e13, 1.0}};
    model::correction k{};
    REQUIRE(model::fit_correction(base, collective::all_reduce, algorithm::ring, 8, 0, m, k));
    CHECK(k.nranks == 8);
    CHECK(k.algo == algorithm::ring);
    CHECK(k.ratio[0] == doctest::Approx(2));  // nearest: 32 B
    CHECK(k.ratio[1] == doctest::Approx(2));  // 32 B itself
    CHECK(k.ratio[3] == doctest::Approx(2));  // 512 B: 32 B is 2 steps away, 32 KiB 3
    CHECK(k.ratio[5] == doctest::Approx(3));  // 32 KiB
    CHECK(k.ratio[12] == doctest::Approx(3)); // above: the last measured
    // Nothing usable: false, `out` untouched; fewer than 2 ranks: refused.
    const model::measurement none[] = {{0, 1.0}, {64, 0.0}};
    model::correction untouched{};
    untouched.nranks = 77;
    CHECK(!model::fit_correction(base, collective::all_reduce, algorithm::ring, 8, 0, none, untouched));
    CHECK(untouched.nranks == 77);
    CHECK_THROWS_AS(model::fit_correction(base, collective::all_reduce, algorithm::ring, 1, 0, m, k), chorus::error);
    // A full topology refuses a new key.
    model::topology full{};
    for (int i = 0; i < model::max_corrections; ++i) {
        model::correction x{};
        x.nranks = 2 + i;
        model::set_correction(full, x);
    }
    CHECK(full.correction_count == model::max_corrections);
    model::correction extra{};
    extra.nranks = 1000;
    CHECK_THROWS_AS(model::set_correction(full, extra), chorus::error);
}

TEST_CASE("automatic on a GPU transport: its candidates run with per-call channels, on the host with one") {
    const model::topology gpu = model::gpu_cluster_topology(0);
    chorus::schedule_args a{collective::all_reduce, 0, 8, 0, (256u << 20) / 4, 4, false, 0};
    a.topo = &gpu;
    a.channel_budget = 32; // 8 virtual ranks on a 132-SM device
    for (const bool commutative : {true, false}) {
        a.commutative = commutative;
        const chorus::any_schedule big = chorus::make_schedule<chorus::automatic>(a);
        INFO("commutative " << commutative << ": picked " << model::algorithm_name(chorus::automatic::choose(a)));
        CHECK(big.channels() == 32);
        a.count = 2; // small calls: one channel
        CHECK(chorus::make_schedule<chorus::automatic>(a).channels() == 1);
        a.channel_budget = 0; // a host transport: the host values, one channel at every size
        a.count = (256u << 20) / 4;
        CHECK(chorus::make_schedule<chorus::automatic>(a).channels() == 1);
        a.channel_budget = 32;
    }
    // A budget of 8 (e.g. 32 ranks on one device) caps every candidate.
    a.channel_budget = 8;
    CHECK(chorus::make_schedule<chorus::automatic>(a).channels() == 8);
}
