// Must not compile: the user's operator takes ints, the elements are `pt`.
// Expected: "chorus: the operator cannot combine two values of the element type"
#include <chorus/chorus.hpp>

#include <span>
#include <vector>

struct add_ints {
  int operator()(int a, int b) const { return a + b; }
  static constexpr bool commutative = true;
};

struct pt {
  float x, y;
};

void compile_fail_case() {
  chorus::run_threads(2, [](chorus::communicator<chorus::threads>& comm) {
#ifndef CHORUS_COMPILE_FAIL_CONTROL
    std::vector<pt> v(8, pt{1.0f, 2.0f});
    chorus::all_reduce(comm, std::span<pt>(v), add_ints{});
#else
    std::vector<int> v(8, 1);
    chorus::all_reduce(comm, std::span<int>(v), add_ints{});
#endif
  });
}
