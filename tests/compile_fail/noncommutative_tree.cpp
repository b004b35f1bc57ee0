// Must not compile: tree<> rotates and mirrors the ranks for its second tree and its roots, so
// an operator that does not declare itself commutative is rejected.
// Expected: "chorus: tree<> reorders operands; the operator must be commutative"
#include <chorus/chorus.hpp>

#include <span>
#include <vector>

struct first {  // no `commutative` member
  template <class T>
  T operator()(T a, T) const { return a; }
};

struct first_declared_commutative {  // control: same operator, declared commutative
  template <class T>
  T operator()(T a, T) const { return a; }
  static constexpr bool commutative = true;
};

void compile_fail_case() {
  chorus::run_threads(2, [](chorus::communicator<chorus::threads>& comm) {
    std::vector<float> v(8, 1.0f);
#ifndef CHORUS_COMPILE_FAIL_CONTROL
    chorus::all_reduce<chorus::tree<>>(comm, std::span<float>(v), first{});
#else
    chorus::all_reduce<chorus::tree<>>(comm, std::span<float>(v), first_declared_commutative{});
#endif
  });
}
