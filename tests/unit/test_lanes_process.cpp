// The lane executor with one rank per process (backend/lane_process.hpp):
// each rank's memory is mapped by its peers at addresses of their own, so
// every pointer a peer publishes is translated (lane_peer_map), and one no
// peer mapped fails the step cleanly (status::unreachable).
// Covered: lane_peer_map::translate at range edges; plan_staging over
// every small input against a reference; the failure reports of an
// unreachable buffer; and, with 2, 3 and 4 forked processes (the test
// process only supervises: it waits for them with a time limit, then
// kills them and fails), ring<> and direct<> (default and 2 channels x
// 64 B) x every collective the lane executor runs x counts {0, 1, 13,
// 3001} with (float, sum) on integer-valued data (exact), each rank's
// every channel a group of 2 threads, over registered buffers, over
// private (malloc'd) buffers staged through the shared scratch, and mixed;
// a rank passing a private buffer unstaged (every rank fails, naming it;
// no crash); a rank SIGKILLed mid-collective (every other rank reports
// peer_failed naming it within the timeout + 1 s); register_range of
// memory the world did not create (shared memory segments each rank makes
// itself, exported by a test provider): peers' maps translate it,
// collectives on it run zero-copy with exact results, deregistration,
// the registration limit and more registrations than it over time, each
// misuse (null, empty, overlapping, unexportable, stale handle, calls that
// differ between ranks, a rank that never calls, a dead rank) named on
// every rank. Nothing is left in
// /dev/shm. Children report through a pipe and their exit code; the
// assertions run in the supervisor.
#include <doctest/doctest.h>

#include <chorus/chorus.hpp>
#include <chorus/backend/gpu_checks.hpp>
#include <chorus/backend/lane_process.hpp>
#include "../expected_sum.hpp"
#include "lane_test_util.hpp"
#include "test_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace chorus;
using chorus::detail::status;
using chorus_test::contains;

namespace {

std::uint64_t mono_ns() {
    return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count());
}

// --- the supervisor ---------------------------------------------------------

struct child_result {
    int pid = 0;
    int wstatus = 0;
    bool killed_by_supervisor = false;
    std::string text; // everything the child said
    bool exited_ok() const { return !killed_by_supervisor && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0; }
};

// Writes one message to the supervisor (no buffering: a child may die next).
void say(int fd, const std::string& s) {
    const std::string line = s + "\n";
    const char* p = line.data();
    std::size_t n = line.size();
    while (n != 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= std::size_t(w);
    }
}

// Forks `n` children running body(rank, id, fd) -> exit code, and waits for
// them at most `limit` (then kills the rest). Never runs doctest macros in
// a child.
template <class Body>
std::vector<child_result> fork_ranks(int n, std::chrono::milliseconds limit, Body&& body) {
    const unique_id id = make_unique_id();
    std::vector<child_result> res(static_cast<std::size_t>(n));
    std::vector<int> rd(std::size_t(n), -1);
    for (int r = 0; r < n; ++r) {
        int fds[2];
        REQUIRE(::pipe(fds) == 0);
        const pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            ::close(fds[0]);
            for (int q = 0; q < r; ++q) ::close(rd[std::size_t(q)]);
            int rc = 1;
            try {
                rc = body(r, id, fds[1]);
            } catch (const error& e) {
                say(fds[1], std::string("FAIL uncaught chorus::error (") + to_string(e.code()) + "): " + e.what());
            } catch (const std::exception& e) {
                say(fds[1], std::string("FAIL uncaught exception: ") + e.what());
            }
            ::_exit(rc);
        }
        ::close(fds[1]);
        ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
        rd[std::size_t(r)] = fds[0];
        res[std::size_t(r)].pid = int(pid);
    }
    auto drain = [&] {
        char buf[4096];
        for (int r = 0; r < n; ++r) {
            if (rd[std::size_t(r)] < 0) continue;
            for (;;) {
                const ssize_t g = ::read(rd[std::size_t(r)], buf, sizeof buf);
                if (g <= 0) break;
                res[std::size_t(r)].text.append(buf, std::size_t(g));
            }
        }
    };
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<bool> done(std::size_t(n), false);
    for (int left = n; left > 0;) {
        for (int r = 0; r < n; ++r) {
            if (done[std::size_t(r)]) continue;
            // Reaped at once: a killed child is no zombie for long.
            if (::waitpid(res[std::size_t(r)].pid, &res[std::size_t(r)].wstatus, WNOHANG) == res[std::size_t(r)].pid) {
                done[std::size_t(r)] = true;
                --left;
            }
        }
        drain();
        if (left == 0) break;
        if (std::chrono::steady_clock::now() > deadline) {
            for (int r = 0; r < n; ++r) {
                if (done[std::size_t(r)]) continue;
                ::kill(res[std::size_t(r)].pid, SIGKILL);
                ::waitpid(res[std::size_t(r)].pid, &res[std::size_t(r)].wstatus, 0);
                res[std::size_t(r)].killed_by_supervisor = true;
            }
            break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    drain();
    for (int fd : rd) ::close(fd);
    return res;
}

// Names the children left in /dev/shm ("chorus-<pid>-...").
std::vector<std::string> shm_left_by(const std::vector<child_result>& kids) {
    std::vector<std::string> left;
    DIR* d = ::opendir("/dev/shm");
    if (d == nullptr) return left;
    while (const dirent* e = ::readdir(d)) {
        int pid = 0;
        if (std::sscanf(e->d_name, "chorus-%d-", &pid) != 1) continue;
        for (const child_result& k : kids)
            if (k.pid == pid) left.emplace_back(e->d_name);
    }
    ::closedir(d);
    return left;
}

void check_children(const std::vector<child_result>& kids) {
    for (std::size_t r = 0; r < kids.size(); ++r) {
        CAPTURE(r);
        INFO(kids[r].text);
        CHECK_FALSE(kids[r].killed_by_supervisor);
        CHECK(kids[r].exited_ok());
        CHECK(contains(kids[r].text, "done"));
        CHECK_FALSE(contains(kids[r].text, "FAIL"));
    }
    CHECK(shm_left_by(kids).empty());
}

// --- one rank's calls -------------------------------------------------------

float value_of(int r, std::uint64_t i) { return float((std::uint64_t(r) * 5 + i * 3) % 13 + 1); }

struct named {
    const char* name;
    policy pol;
};

// Makes this process's later mappings land elsewhere than its peers' (a
// forked child starts with its parent's layout).
void shift_mappings(int rank) {
    const std::size_t bytes = std::size_t(rank + 1) * (std::size_t(1) << 20) + std::size_t(rank) * 3 * 4096;
    (void)::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

// Checks that every peer's segment is mapped here at another address than
// in its owner.
bool addresses_differ(const detail::lane_process_world& w, int fd) {
    for (int r = 0; r < w.size(); ++r) {
        if (r == w.rank()) continue;
        const detail::lane_range& g = w.maps()[std::size_t(r)].ranges[0];
        if (g.their_base == g.my_base) {
            say(fd, "FAIL rank " + std::to_string(r) + "'s scratch has the same address here and in its process");
            return false;
        }
    }
    return true;
}

enum class mem { registered, staged, private_unstaged };

// This rank's buffers: registered ones (allocated once from the world) and
// private ones (malloc'd).
struct rank_buffers {
    float* reg_in = nullptr;
    float* reg_out = nullptr;
    std::vector<float> priv_in, priv_out;
};

// One collective of (float, sum) on this rank: buffers as `m` says, data
// as value_of, the result checked element by element. Returns "" or what
// went wrong ("ERR <errc> <message>" when the call failed).
std::string run_call(detail::lane_process_world& w, rank_buffers& b, const named& p, collective coll,
                     std::uint64_t count, mem m, std::uint64_t timeout_ms = 10000) {
    const int n = w.size(), rank = w.rank(), root = n - 1;
    const bool blocks = coll == collective::all_gather || coll == collective::reduce_scatter;
    const std::uint64_t big = blocks ? count * std::uint64_t(n) : count;
    const std::uint64_t in_len = coll == collective::all_gather ? count : big;
    const std::uint64_t out_len = coll == collective::reduce_scatter ? count : big;
    const std::size_t off = std::size_t(rank % 3); // misalign by 0, 1, 2 elements
    float* in = (m == mem::registered ? b.reg_in : b.priv_in.data()) + off;
    float* out = (m == mem::registered ? b.reg_out : b.priv_out.data()) + off;
    if (m == mem::private_unstaged) out = b.reg_out + off; // only `in` is private
    for (std::uint64_t i = 0; i < in_len; ++i) in[i] = value_of(rank, i);
    for (std::uint64_t i = 0; i < out_len; ++i) out[i] = -1.f;
    if (coll == collective::broadcast) {
        out = in; // broadcast works in one buffer
        if (rank != root)
            for (std::uint64_t i = 0; i < in_len; ++i) in[i] = 0.f;
    }

    schedule_args a{coll, rank, n, root, count, sizeof(float), false, 0};
    a.commutative = true;
    detail::lane_launch<float, sum, any_schedule> L;
    L.world = w.world();
    L.rank = rank;
    L.timeout_ns = timeout_ms * 1000000ull;
    L.op.set(sum{});
    const bool staged = m == mem::staged;
    detail::lane_staging_plan plan{};
    float* run_in = in;
    float* run_out = out;
    if (staged) {
        const bool same = in == out;
        a.in_place = same;
        L.sch = make_schedule(p.pol, a);
        for (int pass = 0; pass < 2; ++pass) {
            plan = detail::plan_staging(L.sch.scratch_elems(), in_len, out_len, sizeof(float), same, w.scratch_bytes());
            run_in = reinterpret_cast<float*>(w.scratch() + plan.in_offset_bytes);
            run_out = reinterpret_cast<float*>(w.scratch() + plan.out_offset_bytes);
            const bool ip = in_place_call<float>(coll, run_in, run_out, rank, count);
            if (ip == a.in_place) break;
            a.in_place = ip; // (empty regions may meet): plan again for that schedule
            L.sch = make_schedule(p.pol, a);
        }
        std::memcpy(run_in, in, std::size_t(same ? std::max(in_len, out_len) : in_len) * sizeof(float));
        L.scratch = reinterpret_cast<float*>(w.scratch() + plan.schedule_offset_bytes);
    } else {
        a.in_place = in_place_call<float>(coll, in, out, rank, count);
        L.sch = make_schedule(p.pol, a);
        if (L.sch.scratch_elems() * sizeof(float) > w.scratch_bytes()) return "FAIL the scratch is too small";
        L.scratch = reinterpret_cast<float*>(w.scratch());
    }
    L.in = run_in;
    L.out = run_out;
    L.sig = chorus_test::lane_signature_of<float, sum>(coll, L.sch.channels(), root, count, p.pol.id());

    if (auto f = w.failure()) return std::string("ERR ") + to_string(f->code()) + " " + f->what();
    const status st = chorus_test::run_rank_lanes(L, 2);
    if (st != status::ok) {
        const auto f = w.failure();
        return std::string("ERR ") + (f ? to_string(f->code()) : "?") + " " + (f ? f->what() : "no fault recorded");
    }
    if (staged) std::memcpy(out, run_out, std::size_t(out_len) * sizeof(float));

    if (coll == collective::reduce && rank != root) return "";
    std::uint64_t wrong = 0, first = 0;
    for (std::uint64_t i = 0; i < out_len; ++i) {
        const float want = chorus_test::expected_sum(coll, rank, n, root, count, i, value_of);
        if (out[i] != want && wrong++ == 0) first = i;
    }
    if (wrong != 0)
        return "FAIL " + std::to_string(wrong) + " wrong elements, the first at " + std::to_string(first) + ": " +
               std::to_string(out[first]);
    return "";
}

constexpr std::uint64_t max_count = 3001;

detail::lane_process_config test_config(int n) {
    detail::lane_process_config cfg;
    const std::uint64_t buf = (max_count * std::uint64_t(n) + 8) * sizeof(float);
    cfg.scratch_bytes = 4 * buf + 4096; // the schedule's scratch and staged copies
    cfg.registered_bytes = 2 * buf + 1024;
    cfg.setup_timeout = std::chrono::milliseconds(10000);
    return cfg;
}

rank_buffers make_buffers(detail::lane_process_world& w) {
    const std::uint64_t elems = max_count * std::uint64_t(w.size()) + 8;
    rank_buffers b;
    b.reg_in = static_cast<float*>(w.allocate_registered(elems * sizeof(float)));
    b.reg_out = static_cast<float*>(w.allocate_registered(elems * sizeof(float)));
    b.priv_in.assign(elems, 0.f);
    b.priv_out.assign(elems, 0.f);
    return b;
}

const char* mem_name(mem m) {
    return m == mem::registered ? "registered" : m == mem::staged ? "staged" : "private";
}

// The matrix on one rank; every rank runs the same calls in the same order.
int matrix_child(int rank, int n, const unique_id& id, int fd) {
    shift_mappings(rank);
    detail::lane_process_world w(id, rank, n, test_config(n));
    if (!addresses_differ(w, fd)) return 1;
    rank_buffers b = make_buffers(w);
    const named pols[] = {{"ring<>", policy_of<ring<>>},
                          {"ring<2ch,64B>", policy_of<ring<ring_params{2, 64}>>},
                          {"direct<>", policy_of<direct<>>},
                          {"direct<2ch,64B>", policy_of<direct<direct_params{2, 64}>>}};
    int calls = 0, failures = 0;
    for (int mode = 0; mode < 3; ++mode) {
        for (const named& p : pols) {
            for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                    collective::broadcast, collective::reduce}) {
                for (std::uint64_t count : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(13), max_count}) {
                    // mode 2 mixes: even ranks registered, odd ranks staged.
                    const mem m = mode == 0 ? mem::registered
                                  : mode == 1 ? mem::staged
                                              : (rank % 2 == 0 ? mem::registered : mem::staged);
                    const std::string r = run_call(w, b, p, coll, count, m);
                    ++calls;
                    if (!r.empty()) {
                        ++failures;
                        say(fd, std::string("FAIL ") + p.name + " " + collective_name(coll) + " count " +
                                    std::to_string(count) + " " + mem_name(m) + " (mode " + std::to_string(mode) +
                                    "): " + r);
                        if (contains(r, "ERR")) return 1; // the world is broken: nothing more can run
                    }
                }
            }
        }
    }
    say(fd, "done " + std::to_string(calls) + " calls");
    return failures == 0 ? 0 : 1;
}

// The exchange collectives on one rank over registered buffers, as the
// GPU backend of one process per GPU runs them: the schedule planned on
// the caller's counts, then reading a private copy of them (the device
// counts area), the caller's array overwritten before the lanes start.
// Returns "" or what went wrong.
std::string run_exchange(detail::lane_process_world& w, rank_buffers& b, const named& p, collective coll,
                         const std::vector<std::uint64_t>& counts, std::uint64_t count) {
    const int n = w.size(), rank = w.rank();
    const std::size_t nn = std::size_t(n), ru = std::size_t(rank);
    std::uint64_t in_len = 0, out_len = 0, total = 0;
    std::vector<std::uint64_t> D(nn + 1, 0);
    for (std::uint64_t k : counts) total += k;
    for (std::size_t q = 0; q < nn && coll != collective::all_to_allv && coll != collective::all_to_all; ++q)
        D[q + 1] = D[q] + counts[q];
    switch (coll) {
    case collective::all_to_all: in_len = out_len = count * nn; break;
    case collective::all_gatherv: in_len = counts[ru]; out_len = total; break;
    case collective::reduce_scatterv: in_len = total; out_len = counts[ru]; break;
    default:
        for (std::size_t j = 0; j < nn; ++j) {
            in_len += counts[ru * nn + j];
            out_len += counts[j * nn + ru];
        }
    }
    const std::size_t off = ru % 3;
    float* in = b.reg_in + off;
    float* out = b.reg_out + off;
    for (std::uint64_t i = 0; i < in_len; ++i) in[i] = value_of(rank, i);
    for (std::uint64_t i = 0; i < out_len; ++i) out[i] = -1.f;
    const bool v = coll != collective::all_to_all;
    std::vector<std::uint64_t> caller(counts), area(counts);
    schedule_args a{coll, rank, n, 0, v ? in_len : count, sizeof(float), false, 0};
    a.commutative = true;
    a.counts = v ? caller.data() : nullptr;
    a.in_place = exchange_in_place<float>(coll, in, out, rank, a.counts);
    detail::lane_launch<float, sum, any_schedule> L;
    L.sch = make_schedule(p.pol, a);
    if (L.sch.scratch_elems() * sizeof(float) > w.scratch_bytes()) return "FAIL the scratch is too small";
    if (v) L.sch.exchange.counts = area.data();
    L.world = w.world();
    L.rank = rank;
    L.in = in;
    L.out = out;
    L.scratch = reinterpret_cast<float*>(w.scratch());
    L.sig = chorus_test::lane_signature_of<float, sum>(coll, L.sch.channels(), 0, v ? total : count, p.pol.id(),
                                                       v ? detail::counts_hash(caller.data(), caller.size()) : 0);
    L.timeout_ns = 10000ull * 1000000ull;
    L.op.set(sum{});
    std::fill(caller.begin(), caller.end(), ~std::uint64_t(0) >> 8); // the caller frees its counts
    if (auto f = w.failure()) return std::string("ERR ") + to_string(f->code()) + " " + f->what();
    const status st = chorus_test::run_rank_lanes(L, 2);
    if (st != status::ok) {
        const auto f = w.failure();
        return std::string("ERR ") + (f ? to_string(f->code()) : "?") + " " + (f ? f->what() : "no fault recorded");
    }
    std::uint64_t wrong = 0;
    for (std::uint64_t i = 0; i < out_len; ++i) {
        float want = 0.f;
        switch (coll) {
        case collective::all_to_all: want = value_of(int(i / count), ru * count + i % count); break;
        case collective::all_gatherv: {
            std::size_t q = 0;
            while (i >= D[q + 1]) ++q;
            want = value_of(int(q), i - D[q]);
            break;
        }
        case collective::reduce_scatterv:
            for (int q = 0; q < n; ++q) want += value_of(q, D[ru] + i);
            break;
        default: {
            std::uint64_t o = 0;
            for (std::size_t q = 0; q < nn; ++q) {
                const std::uint64_t len = counts[q * nn + ru];
                if (i < o + len) {
                    std::uint64_t s0 = 0;
                    for (std::size_t j = 0; j < ru; ++j) s0 += counts[q * nn + j];
                    want = value_of(int(q), s0 + (i - o));
                    break;
                }
                o += len;
            }
        }
        }
        wrong += out[i] != want;
    }
    if (wrong) return "FAIL " + std::to_string(wrong) + " wrong elements";
    return "";
}

int exchange_child(int rank, int n, const unique_id& id, int fd) {
    shift_mappings(rank);
    detail::lane_process_world w(id, rank, n, test_config(n));
    if (!addresses_differ(w, fd)) return 1;
    rank_buffers b = make_buffers(w);
    const named pols[] = {{"automatic", policy_of<automatic>},
                          {"direct<2ch,64B>", policy_of<direct<direct_params{2, 64}>>}};
    const std::size_t nn = std::size_t(n);
    std::vector<std::uint64_t> vc(nn), mc(nn * nn);
    for (std::size_t q = 0; q < nn; ++q) vc[q] = q == 1 ? 0 : (q * 37 + 5) % 50 + 1;
    for (std::size_t i = 0; i < mc.size(); ++i) mc[i] = (i / nn * 3 + i % nn * 5) % 7 * 11;
    int failures = 0;
    for (const named& p : pols) {
        for (collective coll : {collective::all_to_allv, collective::all_gatherv, collective::reduce_scatterv,
                                collective::all_to_all}) {
            const std::string r = run_exchange(w, b, p, coll, coll == collective::all_to_allv ? mc : vc, 101);
            if (!r.empty()) {
                ++failures;
                say(fd, std::string("FAIL ") + p.name + " " + collective_name(coll) + ": " + r);
                if (contains(r, "ERR")) return 1;
            }
        }
    }
    say(fd, "done");
    return failures == 0 ? 0 : 1;
}

} // namespace

TEST_CASE("lane executor, one process per rank: the exchange collectives over registered buffers") {
    for (int n : {2, 3}) {
        CAPTURE(n);
        const auto kids = fork_ranks(n, std::chrono::milliseconds(20000), [n](int rank, const unique_id& id, int fd) {
            return exchange_child(rank, n, id, fd);
        });
        check_children(kids);
    }
}

TEST_CASE("lane_peer_map: a peer's extent translates only whole inside one mapped range") {
    detail::lane_peer_map m{};
    m.ranges[0] = {0x10000, 0x90000, 256};
    m.ranges[1] = {0x20000, 0x30000, 64};
    m.count = 2;
    auto at = [&](std::uint64_t p, std::uint64_t bytes) {
        return reinterpret_cast<std::uint64_t>(m.translate(reinterpret_cast<const void*>(p), bytes));
    };
    CHECK(at(0x10000, 256) == 0x90000);
    CHECK(at(0x10010, 16) == 0x90010);
    CHECK(at(0x10000 + 255, 1) == 0x90000 + 255);
    CHECK(at(0x10000 + 255, 2) == 0);   // the extent runs past the end
    CHECK(at(0x10000 + 256, 1) == 0);   // one past the end
    CHECK(at(0x10000 + 256, 0) == 0x90000 + 256); // an empty extent at the end
    CHECK(at(0x0FFFF, 1) == 0);         // before the start
    CHECK(at(0x20020, 32) == 0x30020);  // the second range
    CHECK(at(0x20020, 33) == 0);
    CHECK(at(0x15000, 4) == 0);         // between ranges
    CHECK(m.translate(nullptr, 0) == nullptr);
    CHECK(at(0x10000, ~std::uint64_t(0)) == 0); // no wrap-around
    detail::lane_peer_map empty{};
    CHECK(empty.translate(reinterpret_cast<const void*>(std::uintptr_t(0x10000)), 1) == nullptr);
}

TEST_CASE("plan_staging: every small input, against a reference, and too small a scratch names the knob") {
    const std::uint64_t A = detail::lane_stage_align_bytes;
    auto up = [&](std::uint64_t v) { return (v + A - 1) / A * A; };
    int checked = 0;
    for (std::uint64_t eb : {1u, 2u, 4u, 8u, 96u}) {
        for (std::uint64_t sched = 0; sched <= 6; ++sched) {
            for (std::uint64_t in = 0; in <= 6; ++in) {
                for (std::uint64_t out = 0; out <= 6; ++out) {
                    for (bool same : {false, true}) {
                        // The reference layout: schedule, in, out, each at a multiple of A.
                        const std::uint64_t sched_b = sched * eb, in_b = (same ? std::max(in, out) : in) * eb,
                                            out_b = same ? 0 : out * eb;
                        const std::uint64_t in_off = up(sched_b);
                        const std::uint64_t out_off = same ? in_off : up(in_off + in_b);
                        const std::uint64_t total = same ? in_off + in_b : out_off + out_b;
                        const std::uint64_t below = total == 0 ? 0 : total - 1;
                        for (std::uint64_t scratch : {total, total + 1, below, std::uint64_t(4096)}) {
                            CAPTURE(eb);
                            CAPTURE(sched);
                            CAPTURE(in);
                            CAPTURE(out);
                            CAPTURE(same);
                            CAPTURE(scratch);
                            ++checked;
                            if (scratch < total) {
                                try {
                                    (void)detail::plan_staging(sched, in, out, eb, same, scratch);
                                    FAIL("no error");
                                } catch (const error& e) {
                                    CHECK(e.code() == errc::invalid_argument);
                                    CHECK(contains(e.what(), std::to_string(total) + " bytes"));
                                    CHECK(contains(e.what(), "has " + std::to_string(scratch) + " bytes"));
                                    CHECK(contains(e.what(), "lane_process_config::scratch_bytes"));
                                }
                                continue;
                            }
                            const auto p = detail::plan_staging(sched, in, out, eb, same, scratch);
                            CHECK(p.schedule_offset_bytes == 0);
                            CHECK(p.in_offset_bytes == in_off);
                            CHECK(p.out_offset_bytes == out_off);
                            CHECK(p.total_bytes == total);
                            CHECK(p.in_offset_bytes % A == 0);
                            CHECK(p.out_offset_bytes % A == 0);
                            // Regions in order and apart: the schedule's ends before in, in before out.
                            CHECK(sched_b <= p.in_offset_bytes);
                            if (!same) CHECK(p.in_offset_bytes + in_b <= p.out_offset_bytes);
                            CHECK(p.total_bytes <= scratch);
                        }
                    }
                }
            }
        }
    }
    CHECK(checked > 10000);
    // Overflow is an error, not a wrapped layout; the knob is the caller's.
    try {
        (void)detail::plan_staging(std::uint64_t(1) << 62, 1, 1, 8, false, ~std::uint64_t(0), "CHORUS_SCRATCH");
        FAIL("no error");
    } catch (const error& e) {
        CHECK(e.code() == errc::invalid_argument);
        CHECK(contains(e.what(), "more than 2^64"));
        CHECK(contains(e.what(), "CHORUS_SCRATCH"));
    }
    CHECK_THROWS_AS((void)detail::plan_staging(1, 1, 1, 0, false, 4096), error);
}

TEST_CASE("lane executor failure reports: an unreachable buffer names its rank") {
    std::vector<detail::lane_fault> f(3);
    f[0].code = int(status::unreachable);
    f[0].peer = 1;
    f[0].unit = 2;
    f[1].code = int(status::aborted);
    f[2].code = int(status::aborted);
    const error e0 = detail::gpu_fault_error(0, f.data(), 3, "");
    CHECK(e0.code() == errc::invalid_argument);
    CHECK(contains(e0.what(), "a buffer of rank 1 is neither registered nor staged"));
    const error e1 = detail::gpu_fault_error(1, f.data(), 3, ""); // the rank that passed it
    CHECK(e1.code() == errc::invalid_argument);
    CHECK(contains(e1.what(), "rank 0 could not read a buffer this rank passed"));
    const error e2 = detail::gpu_fault_error(2, f.data(), 3, "");
    CHECK(e2.code() == errc::peer_failed);
    CHECK(contains(e2.what(), "because rank 0 failed (a buffer of rank 1 is neither registered nor staged"));
}

TEST_CASE("lane_process_world of one rank: registered memory, reachability, no maps") {
    detail::lane_process_config cfg;
    cfg.scratch_bytes = 1000;
    cfg.registered_bytes = 1024;
    detail::lane_process_world w(make_unique_id(), 0, 1, cfg);
    CHECK(w.world().maps == nullptr); // one rank: nothing to translate
    CHECK(w.world().nranks == 1);
    CHECK(w.world().areas[0] != nullptr);
    CHECK_FALSE(w.failure().has_value());
    auto* a = static_cast<std::byte*>(w.allocate_registered(10));
    auto* b = static_cast<std::byte*>(w.allocate_registered(256));
    CHECK(reinterpret_cast<std::uintptr_t>(a) % 256 == 0);
    CHECK(b - a == 256);
    CHECK(w.reachable(a, 10));
    CHECK(w.reachable(b, 256));
    CHECK(w.reachable(w.scratch(), 1000));
    CHECK_FALSE(w.reachable(w.scratch(), 1001));
    std::vector<float> priv(4);
    CHECK_FALSE(w.reachable(priv.data(), 4));
    CHECK_FALSE(w.reachable(nullptr, 0));
    try {
        (void)w.allocate_registered(513); // 1024 - 512 = 512 are left
        FAIL("no error");
    } catch (const error& e) {
        CHECK(e.code() == errc::invalid_argument);
        CHECK(contains(e.what(), "`bytes` 513 do not fit: 512 of lane_process_config::registered_bytes (1024)"));
    }
    CHECK(w.allocate_registered(512) != nullptr);
    w.abort();
    CHECK(w.aborted());
    const auto f = w.failure();
    REQUIRE(f.has_value());
    CHECK(f->code() == errc::aborted);
}

TEST_CASE("lane executor, one process per rank: ring<> and direct<> x every collective, registered and staged") {
    for (int n : {2, 3, 4}) {
        CAPTURE(n);
        const auto t0 = std::chrono::steady_clock::now();
        // A hang guard, not a speed check: the whole matrix per n, which a
        // loaded 2-core machine (sanitizers, a build beside it) once ran
        // past 20 s.
        const auto kids = fork_ranks(n, std::chrono::milliseconds(60000), [n](int rank, const unique_id& id, int fd) {
            return matrix_child(rank, n, id, fd);
        });
        check_children(kids);
        MESSAGE("n = " << n << ": " << chorus_test::seconds_since(t0) << " s");
    }
}

TEST_CASE("lane executor, one process per rank: a private buffer passed unstaged fails every rank, naming it") {
    const int n = 3;
    const auto kids = fork_ranks(n, std::chrono::milliseconds(15000), [](int rank, const unique_id& id, int fd) {
        shift_mappings(rank);
        detail::lane_process_world w(id, rank, n, test_config(n));
        rank_buffers b = make_buffers(w);
        // direct<>: every rank reads every peer's `in`; rank 1's is malloc'd.
        const named p{"direct<>", policy_of<direct<>>};
        const std::string r = run_call(w, b, p, collective::all_reduce, 1001,
                                       rank == 1 ? mem::private_unstaged : mem::registered, 3000);
        say(fd, r.empty() ? std::string("FAIL the call succeeded") : r);
        say(fd, "done");
        return 0;
    });
    check_children(kids);
    int unreachable_seen = 0;
    for (int r = 0; r < n; ++r) {
        const std::string& t = kids[std::size_t(r)].text;
        CAPTURE(r);
        INFO(t);
        CHECK(contains(t, "ERR "));
        CHECK(contains(t, "a buffer of rank 1 is neither registered nor staged"));
        CHECK((contains(t, "ERR invalid argument") || contains(t, "ERR peer failed")));
        if (r != 1 && contains(t, "ERR invalid argument")) ++unreachable_seen;
    }
    CHECK(unreachable_seen >= 1); // a reader of rank 1's `in` saw it itself
    CHECK(contains(kids[1].text, "could not read a buffer this rank passed")); // the rank at fault is told
}

TEST_CASE("lane executor, one process per rank: a rank killed mid-collective, the others report peer_failed in time") {
    const std::uint64_t timeout_ms = 1500;
    for (int n : {3, 4}) {
        CAPTURE(n);
        const int victim = 1;
        const auto kids = fork_ranks(n, std::chrono::milliseconds(15000), [&](int rank, const unique_id& id, int fd) {
            shift_mappings(rank);
            detail::lane_process_world w(id, rank, n, test_config(n));
            rank_buffers b = make_buffers(w);
            const named p{"ring<2ch,64B>", policy_of<ring<ring_params{2, 64}>>};
            std::thread killer;
            if (rank == victim)
                killer = std::thread([fd] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(150));
                    say(fd, "KILL " + std::to_string(mono_ns()));
                    ::kill(::getpid(), SIGKILL);
                });
            const auto t0 = std::chrono::steady_clock::now();
            int calls = 0;
            while (chorus_test::seconds_since(t0) < 10.0) {
                const std::string r = run_call(w, b, p, collective::all_reduce, max_count, mem::registered, timeout_ms);
                ++calls;
                if (!r.empty()) {
                    say(fd, "AT " + std::to_string(mono_ns()) + " after " + std::to_string(calls) + " calls");
                    say(fd, r);
                    say(fd, "done");
                    if (killer.joinable()) killer.join();
                    return 0;
                }
            }
            say(fd, "FAIL no call failed in 10 s");
            if (killer.joinable()) killer.join();
            return 1;
        });
        const child_result& v = kids[std::size_t(victim)];
        CHECK(WIFSIGNALED(v.wstatus));
        CHECK(WTERMSIG(v.wstatus) == SIGKILL);
        std::uint64_t killed_at = 0;
        if (const auto k = v.text.find("KILL "); k != std::string::npos) killed_at = std::stoull(v.text.substr(k + 5));
        REQUIRE(killed_at != 0);
        for (int r = 0; r < n; ++r) {
            if (r == victim) continue;
            const child_result& k = kids[std::size_t(r)];
            CAPTURE(r);
            INFO(k.text);
            CHECK(k.exited_ok());
            CHECK(contains(k.text, "ERR peer failed"));
            CHECK(contains(k.text, "rank 1 (process " + std::to_string(v.pid) + ") died"));
            std::uint64_t at = 0;
            if (const auto a = k.text.find("AT "); a != std::string::npos) at = std::stoull(k.text.substr(a + 3));
            REQUIRE(at != 0);
            CHECK(at >= killed_at);
            CHECK(double(at - killed_at) / 1e9 < double(timeout_ms) / 1e3 + 1.0);
        }
        CHECK(shm_left_by(kids).empty());
    }
}

// --- the world's parts: registered memory, providers, bootstrap -------------

namespace {

// Providers that count their calls around POSIX shared memory: one for the
// rank segments, one for the node segment.
struct provider_calls {
    int create = 0, open = 0, unlink = 0, close = 0;
};
provider_calls g_rank_calls, g_node_calls;
const detail::lane_memory_provider g_shm = detail::posix_shm_provider();

template <provider_calls* C>
detail::lane_memory_provider counting_provider() {
    detail::lane_memory_provider p;
    p.create = [](std::size_t bytes, detail::lane_segment_name& name, const std::string& knob) {
        ++C->create;
        return g_shm.create(bytes, name, knob);
    };
    p.open = [](const detail::lane_segment_name& name, std::size_t bytes) {
        ++C->open;
        return g_shm.open(name, bytes);
    };
    p.unlink = [](const detail::lane_segment_name& name) {
        ++C->unlink;
        g_shm.unlink(name);
    };
    p.close = [](detail::lane_mapping& m) {
        ++C->close;
        g_shm.close(m);
    };
    return p;
}

// A lane_bootstrap over another, counting the calls (or, with
// `short_by`, returning that many bytes too few from the first exchange).
class counting_bootstrap final : public detail::lane_bootstrap {
public:
    explicit counting_bootstrap(detail::lane_bootstrap& inner, std::size_t short_by = 0)
        : inner_(inner), short_by_(short_by) {}
    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    std::vector<std::byte> all_gather(const void* mine, std::size_t bytes) override {
        ++gathers;
        std::vector<std::byte> all = inner_.all_gather(mine, bytes);
        if (gathers == 1 && short_by_ != 0) all.resize(all.size() - short_by_);
        return all;
    }
    void close() override {
        ++closes;
        inner_.close();
    }
    int gathers = 0, closes = 0;

private:
    detail::lane_bootstrap& inner_;
    std::size_t short_by_;
};

// Names this process has in /dev/shm ("chorus-<pid>-...").
int own_shm_names() {
    int k = 0;
    DIR* d = ::opendir("/dev/shm");
    if (d == nullptr) return 0;
    while (const dirent* e = ::readdir(d)) {
        int pid = 0;
        if (std::sscanf(e->d_name, "chorus-%d-", &pid) == 1 && pid == int(::getpid())) ++k;
    }
    ::closedir(d);
    return k;
}

} // namespace

TEST_CASE("lane_process_world: allocate_registered fills freed gaps; free_registered refuses what it did not give") {
    detail::lane_process_config cfg;
    cfg.scratch_bytes = 4096;
    cfg.registered_bytes = 1024;
    detail::lane_process_world w(make_unique_id(), 0, 1, cfg);
    auto* a = static_cast<std::byte*>(w.allocate_registered(256));
    auto* b = static_cast<std::byte*>(w.allocate_registered(300)); // takes [256, 556), rounded to 512
    auto* c = static_cast<std::byte*>(w.allocate_registered(256));
    CHECK(b - a == 256);
    CHECK(c - a == 768);
    CHECK(w.registered_in_use_bytes() == 812);
    w.free_registered(b);
    CHECK(w.registered_in_use_bytes() == 512);
    auto* d = static_cast<std::byte*>(w.allocate_registered(512)); // b's gap, exactly
    CHECK(d == b);
    w.free_registered(a);
    CHECK(static_cast<std::byte*>(w.allocate_registered(10)) == a); // the first gap that fits
    try {
        (void)w.allocate_registered(1);
        FAIL("no error");
    } catch (const error& e) {
        CHECK(e.code() == errc::invalid_argument);
        CHECK(contains(e.what(), "`bytes` 1 do not fit: 0 of lane_process_config::registered_bytes (1024)"));
    }
    for (const void* bad : {static_cast<const void*>(a + 1), static_cast<const void*>(nullptr),
                            static_cast<const void*>(w.scratch())}) {
        try {
            w.free_registered(bad, "`buf`");
            FAIL("no error");
        } catch (const error& e) {
            CHECK(e.code() == errc::invalid_argument);
            CHECK(contains(e.what(), "free_registered: `buf` is not the start of a block"));
        }
    }
    w.free_registered(d);
    try {
        w.free_registered(d); // twice
        FAIL("no error");
    } catch (const error& e) {
        CHECK(contains(e.what(), "freed already"));
    }
    try {
        (void)w.allocate_registered(0);
        FAIL("no error");
    } catch (const error& e) {
        CHECK(contains(e.what(), "`bytes` is 0"));
    }
}

TEST_CASE("lane_process_world: rank segments and the node segment come from their own providers") {
    g_rank_calls = {};
    g_node_calls = {};
    detail::lane_process_config cfg;
    cfg.scratch_bytes = 4096;
    cfg.memory = counting_provider<&g_rank_calls>();
    cfg.node_memory = counting_provider<&g_node_calls>();
    cfg.knob_prefix = "my::options::";
    {
        detail::lane_process_world w(make_unique_id(), 0, 1, cfg);
        CHECK(g_rank_calls.create == 1);
        CHECK(g_node_calls.create == 1);
        CHECK(g_rank_calls.unlink == 1); // every name goes once every rank mapped it
        CHECK(g_node_calls.unlink == 1);
        CHECK(g_rank_calls.open + g_node_calls.open == 0);
        CHECK(w.node_mapping().base != nullptr);
        CHECK(reinterpret_cast<std::byte*>(w.abort_word()) == w.node_mapping().base);
        CHECK(w.world().abort == w.abort_word());
        CHECK(w.world().faults == w.fault_records());
        CHECK(w.areas().size() == 1);
        CHECK(w.pid_of(0) == ::getpid());
        try {
            (void)w.allocate_registered(1); // registered_bytes 0: the error names the caller's knob
            FAIL("no error");
        } catch (const error& e) {
            CHECK(contains(e.what(), "my::options::registered_bytes"));
        }
    }
    CHECK(g_rank_calls.close == 1);
    CHECK(g_node_calls.close == 1);
    // A provider without every function is refused by name, before any rank is waited for.
    detail::lane_process_config bad = cfg;
    bad.node_memory.open = nullptr;
    try {
        detail::lane_process_world w(make_unique_id(), 0, 2, bad);
        FAIL("no error");
    } catch (const error& e) {
        CHECK(e.code() == errc::invalid_argument);
        CHECK(contains(e.what(), "`cfg.node_memory` lacks a function"));
    }
}

TEST_CASE("lane_process_world over a caller's lane_bootstrap: two exchanges and a close; a bad one leaves nothing") {
    SUBCASE("one rank") {
        detail::file_lane_bootstrap file(make_unique_id(), 0, 1, std::chrono::milliseconds(5000));
        counting_bootstrap boot(file);
        detail::lane_process_config cfg;
        cfg.scratch_bytes = 4096;
        {
            detail::lane_process_world w(boot, cfg);
            CHECK(w.rank() == 0);
            CHECK(w.size() == 1);
            CHECK(w.peers_left()); // no peers
        }
        CHECK(boot.gathers == 2);
        CHECK(boot.closes == 1);
    }
    SUBCASE("a bootstrap that returns too few bytes: errc::internal, no name left in /dev/shm") {
        detail::file_lane_bootstrap file(make_unique_id(), 0, 1, std::chrono::milliseconds(5000));
        counting_bootstrap boot(file, 8);
        const int before = own_shm_names();
        try {
            detail::lane_process_world w(boot, detail::lane_process_config{});
            FAIL("no error");
        } catch (const error& e) {
            CHECK(e.code() == errc::internal);
            CHECK(contains(e.what(), "the bootstrap returned"));
        }
        CHECK(own_shm_names() == before);
    }
    SUBCASE("3 forked ranks: calls registered and staged, each rank's peers opened through the providers") {
        const int n = 3;
        const auto kids = fork_ranks(n, std::chrono::milliseconds(20000), [](int rank, const unique_id& id, int fd) {
            shift_mappings(rank);
            g_rank_calls = {};
            g_node_calls = {};
            detail::file_lane_bootstrap file(id, rank, n, std::chrono::milliseconds(10000));
            counting_bootstrap boot(file);
            detail::lane_process_config cfg = test_config(n);
            cfg.memory = counting_provider<&g_rank_calls>();
            cfg.node_memory = counting_provider<&g_node_calls>();
            detail::lane_process_world w(boot, cfg);
            if (boot.gathers != 2 || boot.closes != 1) say(fd, "FAIL bootstrap calls: " + std::to_string(boot.gathers));
            if (g_rank_calls.create != 1 || g_rank_calls.open != n - 1)
                say(fd, "FAIL rank segments: " + std::to_string(g_rank_calls.create) + " created, " +
                            std::to_string(g_rank_calls.open) + " opened");
            if (g_node_calls.create != (rank == 0 ? 1 : 0) || g_node_calls.open != (rank == 0 ? 0 : 1))
                say(fd, "FAIL node segment: " + std::to_string(g_node_calls.create) + " created, " +
                            std::to_string(g_node_calls.open) + " opened");
            if (!addresses_differ(w, fd)) return 1;
            rank_buffers b = make_buffers(w);
            const named p{"ring<>", policy_of<ring<>>};
            for (mem m : {mem::registered, mem::staged}) {
                const std::string r = run_call(w, b, p, collective::all_reduce, max_count, m);
                if (!r.empty()) say(fd, std::string("FAIL ") + mem_name(m) + ": " + r);
            }
            // Leaving: each rank sees the others leave (what the GPU layer
            // waits for before it frees memory its peers map).
            w.mark_left();
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (!w.peers_left() && std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            if (!w.peers_left()) say(fd, "FAIL peers_left() still false after 10 s");
            say(fd, "done");
            return 0;
        });
        check_children(kids);
    }
}

// --- registration of memory the world did not create (register_range) -------

namespace {

// "Arbitrary memory": POSIX shared memory segments a rank creates outside
// its world (as a CUDA user cudaMallocs a buffer). The test provider's
// export_range finds the segment that holds a range.
struct user_segment {
    std::string name;
    detail::shm_segment* seg;
};
std::vector<user_segment> g_user_segments;

std::byte* user_alloc(std::size_t bytes) {
    std::string name;
    auto* s = new detail::shm_segment(detail::shm_segment::create_unique(name, bytes, "the test's user buffers"));
    g_user_segments.push_back({name, s});
    return s->data();
}
// Unlinks and unmaps every user segment (after a deregistration: every
// peer opened whatever it registered).
void user_free_all() {
    for (user_segment& u : g_user_segments) {
        detail::shm_segment::unlink(u.name);
        delete u.seg;
    }
    g_user_segments.clear();
}

detail::lane_memory_provider exporting_provider() {
    detail::lane_memory_provider p = detail::posix_shm_provider();
    p.export_range = [](const void* ptr, std::size_t bytes, detail::lane_segment_name& name, std::uint64_t& base,
                        std::uint64_t& alloc_bytes) {
        const auto* a = static_cast<const std::byte*>(ptr);
        for (const user_segment& u : g_user_segments) {
            const std::byte* b = u.seg->data();
            if (a >= b && a + bytes <= b + u.seg->bytes()) {
                std::snprintf(name.text, sizeof name.text, "%s", u.name.c_str());
                base = reinterpret_cast<std::uint64_t>(b);
                alloc_bytes = u.seg->bytes();
                return;
            }
        }
        throw error(errc::invalid_argument, "the range is not in a segment the test shared");
    };
    return p;
}

// Runs f, which must throw `code` with `text` in its message; else says FAIL.
template <class F>
bool expect_error(int fd, const char* label, errc code, const std::string& text, F&& f) {
    try {
        f();
        say(fd, std::string("FAIL ") + label + ": no error");
        return false;
    } catch (const error& e) {
        if (e.code() == code && contains(e.what(), text)) return true;
        say(fd, std::string("FAIL ") + label + ": got (" + to_string(e.code()) + ") " + e.what());
        return false;
    }
}

int registration_child(int rank, int n, const unique_id& id, int fd) {
    shift_mappings(rank);
    detail::lane_process_config cfg = test_config(n);
    cfg.registered_bytes = 0; // nothing from allocate_registered: every zero-copy call uses registrations
    cfg.memory = exporting_provider();
    detail::lane_process_world w(id, rank, n, cfg);
    int bad = 0;
    auto fail = [&](const std::string& s) {
        say(fd, "FAIL " + s);
        ++bad;
    };
    // The call buffers: `in` inside a larger segment (not its start), `out`
    // a segment of its own; each range ends in a marker float peers read.
    const std::uint64_t elems = max_count * std::uint64_t(n) + 8;
    const std::size_t range = std::size_t(elems + 1) * sizeof(float);
    std::byte* in_seg = user_alloc(range + 4096);
    auto* in = reinterpret_cast<float*>(in_seg + 1024);
    auto* out = reinterpret_cast<float*>(user_alloc(range));
    in[elems] = float(1000 + rank);
    out[elems] = float(2000 + rank);
    if (w.reachable(in, 4)) fail("`in` reachable before it is registered");
    const std::uint64_t h_in = w.register_range(in, range, "`in`");
    const std::uint64_t h_out = w.register_range(out, range, "`out`");
    if (h_in != 1 || h_out != 2) fail("handles " + std::to_string(h_in) + ", " + std::to_string(h_out));
    if (!w.reachable(in, range) || !w.reachable(out + 5, 16) || w.reachable(in, range + 1) || w.registrations() != 2)
        fail("reachable() does not follow the registrations");
    std::vector<std::uint64_t> peer_in(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) {
        if (q == rank) continue;
        const detail::lane_peer_map& m = w.maps()[std::size_t(q)];
        peer_in[std::size_t(q)] = m.ranges[2].their_base;
        const auto* pin = reinterpret_cast<const float*>(m.translate(reinterpret_cast<const void*>(m.ranges[2].their_base), range));
        const auto* pout = reinterpret_cast<const float*>(m.translate(reinterpret_cast<const void*>(m.ranges[3].their_base), range));
        if (m.count != 4 || pin == nullptr || pout == nullptr) {
            fail("rank " + std::to_string(q) + "'s map has " + std::to_string(m.count) + " ranges");
            continue;
        }
        if (m.ranges[2].their_base == m.ranges[2].my_base) fail("a peer's range at the same address here");
        if (pin[elems] != float(1000 + q) || pout[elems] != float(2000 + q))
            fail("rank " + std::to_string(q) + "'s markers read " + std::to_string(pin[elems]) + ", " +
                 std::to_string(pout[elems]));
        if (m.translate(reinterpret_cast<const void*>(m.ranges[2].their_base), range + 1) != nullptr)
            fail("a peer's extent past its range translates");
    }
    // Zero-copy calls on the registered buffers (run_call's `registered`:
    // nothing staged, the peers translate `in` and `out` through the maps).
    rank_buffers b;
    b.reg_in = in;
    b.reg_out = out;
    for (const named& p : {named{"ring<>", policy_of<ring<>>}, named{"direct<2ch,64B>", policy_of<direct<direct_params{2, 64}>>}})
        for (collective coll : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce})
            for (std::uint64_t count : {std::uint64_t(13), max_count}) {
                const std::string r = run_call(w, b, p, coll, count, mem::registered);
                if (!r.empty()) {
                    fail(std::string(p.name) + " " + collective_name(coll) + " count " + std::to_string(count) + ": " + r);
                    if (contains(r, "ERR")) return 1;
                }
            }
    w.deregister_range(h_in);
    w.deregister_range(h_out, "`out`");
    for (int q = 0; q < n; ++q)
        if (q != rank && (w.maps()[std::size_t(q)].count != 2 ||
                          w.maps()[std::size_t(q)].translate(reinterpret_cast<const void*>(peer_in[std::size_t(q)]), 4) != nullptr))
            fail("a deregistered range is still in rank " + std::to_string(q) + "'s map");
    if (w.reachable(in, 4) || w.registrations() != 0) fail("`in` reachable after deregistration");

    // The limit, and more registrations than the limit over time.
    std::byte* many = user_alloc(64 * 1024);
    std::vector<std::uint64_t> hs; // handles count every call: 2 registrations and 2 deregistrations so far
    for (int round = 0; round < 2; ++round) {
        hs.clear();
        for (int i = 0; i < detail::max_lane_registrations; ++i) hs.push_back(w.register_range(many + i * 256, 256));
        for (int q = 0; q < n; ++q)
            if (q != rank && w.maps()[std::size_t(q)].count != detail::max_lane_ranges) fail("a full map is not full");
        if (!expect_error(fd, "the limit", errc::invalid_argument, "max_lane_registrations = 14", [&] {
                (void)w.register_range(many + 20 * 256, 256, "`buf`");
            }))
            ++bad;
        for (std::uint64_t h : hs) w.deregister_range(h);
    }
    if (hs.front() != 4 + 14 + 1 + 14 + 1) fail("the second round's first handle is " + std::to_string(hs.front()));

    // A rank's refused arguments: it names them, its peers name it; nothing changes.
    const std::uint64_t keep = w.register_range(many, 1024);
    std::vector<float> priv(16);
    struct bad_call {
        const char* label;
        int who;
        const void* p;
        std::uint64_t bytes;
        const char* text;
    };
    const bad_call calls[] = {
        {"null", 1, nullptr, 64, "`buf` is null"},
        {"empty", 0, many + 4096, 0, "`buf` is empty"},
        {"overlapping", 0, many + 512, 1024, "`buf` overlaps registration"},
        {"own segment", n - 1, w.scratch(), 64, "`buf` overlaps this rank's shared segment"},
        {"not exportable", 1, priv.data(), 64, "the range is not in a segment the test shared"},
    };
    for (const bad_call& c : calls) {
        if (rank == c.who) {
            if (!expect_error(fd, c.label, errc::invalid_argument, c.text,
                              [&] { (void)w.register_range(c.p, c.bytes, "`buf`"); }))
                ++bad;
        } else if (!expect_error(fd, c.label, errc::peer_failed,
                                 "rank " + std::to_string(c.who) + " refused its own arguments",
                                 [&] { (void)w.register_range(many + 8192, 64, "`buf`"); })) {
            ++bad;
        }
        if (w.registrations() != 1) fail(std::string(c.label) + ": registrations changed");
    }
    if (!expect_error(fd, "a stale handle", errc::invalid_argument, "`handle` (" + std::to_string(h_in) + ") is not a live",
                      [&] { w.deregister_range(h_in); }))
        ++bad;
    // Calls that differ between ranks: errc::mismatch on every rank, nothing changes.
    if (!expect_error(fd, "register against deregister", errc::mismatch, "where this rank called", [&] {
            if (rank == 0) w.deregister_range(keep);
            else (void)w.register_range(many + 8192, 64);
        }))
        ++bad;
    const std::uint64_t other = w.register_range(many + 8192, 64);
    if (!expect_error(fd, "other handles", errc::mismatch, "deregisters handle", [&] {
            w.deregister_range(rank == 0 ? keep : other);
        }))
        ++bad;
    if (w.registrations() != 2) fail("a mismatch changed the registrations");
    w.deregister_range(other);
    w.deregister_range(keep); // a barrier: every peer opened and closed everything
    user_free_all();
    say(fd, "done");
    return bad == 0 ? 0 : 1;
}

} // namespace

TEST_CASE("lane_process_world::register_range: user memory registered, zero-copy calls, limits and misuse") {
    for (int n : {2, 3}) {
        CAPTURE(n);
        const auto t0 = std::chrono::steady_clock::now();
        const auto kids = fork_ranks(n, std::chrono::milliseconds(20000), [n](int rank, const unique_id& id, int fd) {
            return registration_child(rank, n, id, fd);
        });
        check_children(kids);
        MESSAGE("n = " << n << ": " << chorus_test::seconds_since(t0) << " s");
    }
}

TEST_CASE("lane_process_world::register_range of one rank, and a provider without export_range") {
    detail::lane_process_config cfg;
    cfg.scratch_bytes = 4096;
    {
        detail::lane_process_world w(make_unique_id(), 0, 1, cfg); // posix_shm_provider: no export_range
        std::vector<float> v(4);
        try {
            (void)w.register_range(v.data(), 16);
            FAIL("no error");
        } catch (const error& e) {
            CHECK(e.code() == errc::invalid_argument);
            CHECK(contains(e.what(), "register_range (registration call 1 of this world): `cfg.memory` has no export_range"));
        }
    }
    cfg.memory = exporting_provider();
    detail::lane_process_world w(make_unique_id(), 0, 1, cfg);
    std::byte* p = user_alloc(4096);
    const std::uint64_t h = w.register_range(p + 100, 1000);
    CHECK(h == 1);
    CHECK(w.reachable(p + 100, 1000));
    CHECK_FALSE(w.reachable(p + 99, 2));
    CHECK(w.world().maps == nullptr);
    w.deregister_range(h);
    CHECK_FALSE(w.reachable(p + 100, 1));
    user_free_all();
}

TEST_CASE("lane_process_world::register_range: a rank that never calls times out its peers; a dead one fails them") {
    SUBCASE("timeout: errc::timeout naming the missing rank, the world aborted") {
        const auto kids = fork_ranks(2, std::chrono::milliseconds(15000), [](int rank, const unique_id& id, int fd) {
            detail::lane_process_config cfg = test_config(2);
            cfg.setup_timeout = std::chrono::milliseconds(1500);
            cfg.memory = exporting_provider();
            detail::lane_process_world w(id, rank, 2, cfg);
            if (rank == 0) {
                std::byte* p = user_alloc(4096);
                const auto t0 = std::chrono::steady_clock::now();
                if (!expect_error(fd, "timeout", errc::timeout, "rank(s) 1 did not make this call within 1500 ms",
                                  [&] { (void)w.register_range(p, 64); }))
                    return 1;
                if (chorus_test::seconds_since(t0) > 5.0) say(fd, "FAIL the timeout took too long");
                if (!w.aborted()) say(fd, "FAIL the world is not aborted");
                user_free_all();
            } else {
                const auto t0 = std::chrono::steady_clock::now();
                while (!w.aborted() && chorus_test::seconds_since(t0) < 10.0)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                if (!w.aborted()) say(fd, "FAIL rank 0's timeout did not abort the world");
                // Registering in a broken world fails at once.
                if (!expect_error(fd, "after the abort", errc::aborted, "the world was aborted",
                                  [&] { (void)w.register_range(nullptr, 1); }))
                    return 1;
            }
            say(fd, "done");
            return 0;
        });
        check_children(kids);
    }
    SUBCASE("dead peer: errc::peer_failed naming it") {
        const int n = 3;
        const auto kids = fork_ranks(n, std::chrono::milliseconds(15000), [](int rank, const unique_id& id, int fd) {
            detail::lane_process_config cfg = test_config(n);
            cfg.memory = exporting_provider();
            detail::lane_process_world w(id, rank, n, cfg);
            if (rank == 2) {
                say(fd, "done");
                ::_exit(0); // dies without leaving its world
            }
            std::byte* p = user_alloc(4096);
            const bool ok = expect_error(fd, "dead peer", errc::peer_failed, "rank 2 (process",
                                         [&] { (void)w.register_range(p, 64); });
            user_free_all();
            if (!ok) return 1;
            say(fd, "done");
            return 0;
        });
        check_children(kids);
    }
}
