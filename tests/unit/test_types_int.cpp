// Every collective against a serial reference for the integer element
// types (types_matrix.hpp has the matrix; test_types_float.cpp the others).
#include "types_matrix.hpp"

TEST_CASE_TEMPLATE("collectives match a serial reference (ops x algorithms x counts x ranks x placement)", T,
                   std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, std::uint32_t, std::int64_t,
                   std::uint64_t) {
    run_type_matrix<T>();
}
