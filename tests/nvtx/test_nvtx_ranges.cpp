// The NVTX ranges chorus pushes around host collectives (core/nvtx.hpp,
// comm/communicator.hpp), seen by a tool: run with NVTX_INJECTION64_PATH
// naming tests/nvtx's recorder (nvtx_inject.cpp; CTest sets it), the
// threads backend runs a mix of collectives — the small-message protocol,
// ring<> with two channels, direct<>, automatic's picks, a barrier, an
// async call (run on the communicator's worker thread), all_to_all — and
// the recorder's log must show, in the domain "chorus":
//   * every push popped on its own thread, no range left open, none nested;
//   * one range per call and rank, named "<collective> <algorithm> <k>ch"
//     with the call's bytes as a uint64 payload: what last_call() reports,
//     and for the calls whose algorithm is fixed, the names written here;
//   * the range's category named after its algorithm.
// Prints "nvtx_ranges: OK" or the failures (exit 1); exit 77 (Skipped)
// without the recorder.

#include <chorus/chorus.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

static_assert(CHORUS_NVTX == 1, "tests/nvtx is built only where <nvtx3/nvToolsExt.h> is on the include path");

namespace {

int failures = 0;
void fail(const std::string& what) {
    std::printf("FAIL: %s\n", what.c_str());
    ++failures;
}

struct range {
    std::string message;
    std::uint64_t payload = 0;
    bool operator<(const range& o) const { return message != o.message ? message < o.message : payload < o.payload; }
    bool operator==(const range& o) const { return message == o.message && payload == o.payload; }
};

std::string name_of(const chorus::call_info& i) {
    return std::string(chorus::collective_name(i.coll)) + " " + i.algorithm + " " + std::to_string(i.channels) + "ch";
}

} // namespace

int main() {
    const char* path = std::getenv("NVTX_INJECTION64_PATH");
    if (path == nullptr || *path == '\0') {
        std::printf("CHORUS_SKIP: NVTX_INJECTION64_PATH is not set (run through CTest)\n");
        return 77;
    }
    constexpr int n = 4;
    std::mutex m;
    std::vector<range> expected;  // from last_call(), every rank's calls
    std::vector<std::string> fixed_errors;

    chorus::run_threads(n, [&](chorus::communicator<chorus::threads>& comm) {
        const int r = comm.rank();
        auto note = [&](const char* want, std::uint64_t bytes) {
            const chorus::call_info i = comm.last_call();
            std::lock_guard<std::mutex> lk(m);
            expected.push_back({name_of(i), i.bytes});
            if (want != nullptr && (name_of(i) != want || i.bytes != bytes))
                fixed_errors.push_back("rank " + std::to_string(r) + ": last_call() says '" + name_of(i) + "', " +
                                       std::to_string(i.bytes) + " B; expected '" + want + "', " +
                                       std::to_string(bytes) + " B");
        };
        std::vector<float> small(2, 1.0f);
        chorus::all_reduce(comm, std::span(small)); // automatic, 8 B: the small-message protocol
        note("all_reduce small 1ch", 8);

        std::vector<float> big(1 << 18, 1.0f); // 1 MiB
        chorus::all_reduce<chorus::ring<chorus::ring_params{.channels = 2}>>(comm, std::span(big));
        note("all_reduce ring 2ch", 1 << 20);

        std::vector<int> mine(16, r), all(16 * n);
        chorus::all_gather<chorus::direct<>>(comm, std::span<const int>(mine), std::span(all));
        note("all_gather direct 1ch", 16 * 4 * n);

        std::vector<float> large(1 << 20, 1.0f); // 4 MiB: automatic's pick, as last_call() names it
        chorus::all_reduce(comm, std::span(large));
        note(nullptr, 0);

        chorus::barrier(comm);
        note("barrier small 1ch", 0);

        std::vector<double> mid(8192, 1.0); // 64 KiB, async: on the worker thread
        chorus::future f = chorus::all_reduce_async<chorus::tree<>>(comm, std::span(mid));
        note("all_reduce tree 1ch", 65536);
        f.wait();

        std::vector<int> buf(3, r == 0 ? 7 : 0);
        chorus::broadcast(comm, std::span(buf), 0);
        note(nullptr, 0);

        std::vector<int> send(4 * n, r), recv(4 * n);
        chorus::all_to_all(comm, std::span<const int>(send), std::span(recv));
        note("all_to_all exchange 1ch", 4 * 4 * n);
    });
    for (const std::string& e : fixed_errors) fail(e);

    void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) {
        fail(std::string("the recorder was never loaded (") + path + "): NVTX did not attach it");
        return 1;
    }
    using count_fn = std::size_t (*)();
    using event_fn = int (*)(std::size_t, int*, const char**, const char**, std::uint32_t*, int*, std::uint64_t*);
    using category_fn = const char* (*)(std::uint32_t);
    auto count = reinterpret_cast<count_fn>(dlsym(lib, "chorus_nvtx_event_count"));
    auto event = reinterpret_cast<event_fn>(dlsym(lib, "chorus_nvtx_event"));
    auto category = reinterpret_cast<category_fn>(dlsym(lib, "chorus_nvtx_category"));
    if (count == nullptr || event == nullptr || category == nullptr) {
        fail("the recorder lacks its query functions");
        return 1;
    }

    std::map<int, std::vector<range>> open; // per thread: its open ranges
    std::vector<range> seen;
    std::size_t pushes = 0, pops = 0;
    for (std::size_t i = 0; i < count(); ++i) {
        int thread = 0, type = 0;
        const char *domain = nullptr, *message = nullptr;
        std::uint32_t cat = 0;
        std::uint64_t payload = 0;
        const bool push = event(i, &thread, &domain, &message, &cat, &type, &payload) == 1;
        if (std::string(domain) != "chorus") fail("event " + std::to_string(i) + " in domain '" + domain + "'");
        std::vector<range>& stack = open[thread];
        if (!push) {
            ++pops;
            if (stack.empty()) fail("a pop without a push on thread " + std::to_string(thread));
            else stack.pop_back();
            continue;
        }
        ++pushes;
        if (!stack.empty()) fail("range '" + std::string(message) + "' nested in '" + stack.back().message + "'");
        if (type != NVTX_PAYLOAD_TYPE_UNSIGNED_INT64) fail(std::string("range '") + message + "': payload not uint64");
        const std::string msg = message;
        const std::size_t a = msg.find(' '), b = msg.rfind(' ');
        const std::string algo = a != std::string::npos && b > a ? msg.substr(a + 1, b - a - 1) : "";
        if (algo.empty() || algo != category(cat))
            fail("range '" + msg + "': category " + std::to_string(cat) + " is named '" + category(cat) + "'");
        stack.push_back({msg, payload});
        seen.push_back({msg, payload});
    }
    for (const auto& [thread, stack] : open)
        if (!stack.empty()) fail("thread " + std::to_string(thread) + " left '" + stack.back().message + "' open");

    std::sort(expected.begin(), expected.end());
    std::sort(seen.begin(), seen.end());
    if (seen != expected) {
        fail("the ranges differ from the calls (" + std::to_string(seen.size()) + " ranges, " +
             std::to_string(expected.size()) + " calls)");
        for (const range& x : expected) std::printf("  call : %s (%llu B)\n", x.message.c_str(), (unsigned long long)x.payload);
        for (const range& x : seen) std::printf("  range: %s (%llu B)\n", x.message.c_str(), (unsigned long long)x.payload);
    }
    if (failures != 0) {
        std::printf("nvtx_ranges: %d failure(s)\n", failures);
        return 1;
    }
    std::printf("nvtx_ranges: %zu ranges (%zu pushes, %zu pops) on %zu threads, as the calls said\n", seen.size(),
                pushes, pops, open.size());
    std::printf("nvtx_ranges: OK\n");
    return 0;
}
