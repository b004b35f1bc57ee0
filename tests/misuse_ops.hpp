#pragma once
// User operators that misbehave, shared by the threads and MPI misuse
// tests (tests/unit/test_errors.cpp, tests/mpi/test_misuse.cpp).

#include <chorus/chorus.hpp>

#include <span>
#include <stdexcept>
#include <vector>

namespace misuse {

//! Throws where `fail` is set (a user operator failing inside a collective).
struct throwing_sum {
    static constexpr bool commutative = true;
    static constexpr const char* name = "throwing_sum";
    bool fail = false;
    float operator()(float a, float b) const {
        if (fail) throw std::runtime_error("test: the user operator failed");
        return a + b;
    }
};

//! Calls back into the communicator it is given (a re-entrant operator).
template <class Comm>
struct reentrant_sum {
    static constexpr bool commutative = true;
    static constexpr const char* name = "reentrant_sum";
    Comm* comm = nullptr;
    float operator()(float a, float b) const {
        if (comm != nullptr) {
            std::vector<float> x(4, 1.0f);
            chorus::all_reduce(*comm, std::span<float>(x));
        }
        return a + b;
    }
};

} // namespace misuse
