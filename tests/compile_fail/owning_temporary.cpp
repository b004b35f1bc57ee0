// Must not compile: a temporary std::vector's storage would not outlive the
// call (collectives/buffers.hpp). A named vector is fine.
// Expected: "chorus: all_reduce_async: an owning container passed as a temporary"
#include <chorus/chorus.hpp>

#include <vector>

void compile_fail_case() {
  chorus::run_threads(2, [](chorus::communicator<chorus::threads>& comm) {
#ifndef CHORUS_COMPILE_FAIL_CONTROL
    chorus::future f = chorus::all_reduce_async(comm, std::vector<float>(8, 1.0f));
#else
    std::vector<float> v(8, 1.0f);
    chorus::future f = chorus::all_reduce_async(comm, v);
#endif
    f.wait();
  });
}
