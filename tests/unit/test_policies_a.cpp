// The tree and recursive policies against the serial reference (see
// policy_matrix.hpp for the matrix).
#include "policy_matrix.hpp"

TEST_CASE("tree policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy<chorus::tree<>>("tree<>") << " calls per rank");
    MESSAGE(run_policy<chorus::tree<{.channels = 2, .chunk_bytes = 16}>, false>("tree<2ch,16B>") << " calls per rank");
}

TEST_CASE("recursive_doubling policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy<chorus::recursive_doubling<>>("recursive_doubling<>") << " calls per rank");
    MESSAGE(run_policy<chorus::recursive_doubling<{.channels = 2, .chunk_bytes = 16}>, false>(
                "recursive_doubling<2ch,16B>")
            << " calls per rank");
}

TEST_CASE("rabenseifner policy matches the serial reference on 1..9 ranks") {
    MESSAGE(run_policy<chorus::rabenseifner<>>("rabenseifner<>") << " calls per rank");
    MESSAGE(run_policy<chorus::rabenseifner<{.channels = 3, .chunk_bytes = 64}>, false>("rabenseifner<3ch,64B>")
            << " calls per rank");
}
