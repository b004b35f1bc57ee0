// Must not compile: bitwise operators make no sense on float.
// Expected: "chorus: bit_and/bit_or/bit_xor need an integral element type"
#include <chorus/chorus.hpp>

#include <span>
#include <vector>

void compile_fail_case() {
  chorus::run_threads(2, [](chorus::communicator<chorus::threads>& comm) {
#ifndef CHORUS_COMPILE_FAIL_CONTROL
    std::vector<float> v(8, 1.0f);
    chorus::all_reduce(comm, std::span<float>(v), chorus::bit_and{});
#else
    std::vector<unsigned> v(8, 1u);
    chorus::all_reduce(comm, std::span<unsigned>(v), chorus::bit_and{});
#endif
  });
}
