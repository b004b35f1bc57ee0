// The GPU suite's (element type, operator) pairs compiled in this
// translation unit (see gpu_suite.cu for what the suite covers and
// gpu_suite.hpp for why the pairs are spread over several files).
#include "gpu_suite.hpp"

namespace chorus_gpu_suite {

std::vector<pair_case> pairs_a() {
    return {
        make_pair_case<std::int32_t, chorus::max>("int32/max", true, pair_case::every_pair_policies),
        make_pair_case<std::int8_t, chorus::min>("int8/min", true, pair_case::none),
        make_pair_case<double, chorus::avg>("double/avg", true, pair_case::none),
    };
}

} // namespace chorus_gpu_suite
