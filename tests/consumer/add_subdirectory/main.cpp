// Uses chorus exactly as a user would: 4 threads sum-reduce a vector.
#include <chorus/chorus.hpp>

#include <atomic>
#include <cstdio>
#include <span>
#include <vector>

int main() {
  std::atomic<int> bad{0};
  chorus::run_threads(4, [&](chorus::communicator<chorus::threads>& comm) {
    std::vector<float> v(1000, float(comm.rank() + 1));
    chorus::all_reduce(comm, std::span<float>(v), chorus::sum{});
    for (float x : v)
      if (x != 10.0f) bad = 1;  // 1 + 2 + 3 + 4
  });
  std::puts(bad ? "consumer: WRONG all_reduce result" : "consumer: ok");
  return bad.load();
}
