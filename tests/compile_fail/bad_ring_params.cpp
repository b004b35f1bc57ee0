// Must not compile: a ring needs at least one channel (0 means "chosen per call").
// Expected: "chorus: ring<> needs channels >= 1 (or 0: chosen per call)"
#include <chorus/chorus.hpp>

#include <span>
#include <vector>

void compile_fail_case() {
  chorus::run_threads(2, [](chorus::communicator<chorus::threads>& comm) {
    std::vector<float> v(8, 1.0f);
#ifndef CHORUS_COMPILE_FAIL_CONTROL
    chorus::all_reduce<chorus::ring<{.channels = -1}>>(comm, std::span<float>(v));
#else
    chorus::all_reduce<chorus::ring<{.channels = 1}>>(comm, std::span<float>(v));
#endif
  });
}
