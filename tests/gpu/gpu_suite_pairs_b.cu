// The GPU suite's (element type, operator) pairs compiled in this
// translation unit (see gpu_suite.cu for what the suite covers and
// gpu_suite.hpp for why the pairs are spread over several files).
#include "gpu_suite.hpp"

namespace chorus_gpu_suite {

std::vector<pair_case> pairs_b() {
    return {
        make_pair_case<std::uint64_t, chorus::bit_xor>("uint64/bit_xor", false, pair_case::none),
        make_pair_case<span2, widen>("span2/widen", false, pair_case::none),
        make_pair_case<__half, chorus::sum>("half/sum", false, pair_case::every_pair_policies),
    };
}

} // namespace chorus_gpu_suite
