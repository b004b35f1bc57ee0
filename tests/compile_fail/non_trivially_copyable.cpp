// Must not compile: collectives copy elements as bytes.
// Expected: "chorus: element type must be trivially copyable"
#include <chorus/chorus.hpp>

#include <span>
#include <string>
#include <vector>

void compile_fail_case() {
  chorus::run_threads(2, [](chorus::communicator<chorus::threads>& comm) {
#ifndef CHORUS_COMPILE_FAIL_CONTROL
    std::vector<std::string> v(8, std::string("x"));
    chorus::all_reduce(comm, std::span<std::string>(v), chorus::sum{});
#else
    std::vector<long> v(8, 1L);
    chorus::all_reduce(comm, std::span<long>(v), chorus::sum{});
#endif
  });
}
