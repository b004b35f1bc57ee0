//! \file bench_sweep.cpp
//! chorus_bench's collective instantiations: the rank program (bench_rows)
//! for every element type and every operator, each instance serving every
//! policy (a chorus::policy value chosen at run time), and the float sum
//! call of the interleaved comparison (one of those instances). The bulk of
//! the compile time, kept in its own translation unit so a -j2 build
//! compiles it beside chorus_bench.cpp.

#include "bench.hpp"

namespace chorus_bench {

void run_sweep(bench_state& st, coll_kind c, type_kind t, const chorus::policy& pol) {
    with_type(t, [&](auto type_tag) {
        using T = typename decltype(type_tag)::type;
        chorus::run_threads(st.opt.ranks, [&](comm_type& comm) {
            if (st.opt.timeout_s > 0) comm.set_timeout(std::chrono::seconds(st.opt.timeout_s));
            if (!coll_uses_op(c)) {
                bench_rows<T, chorus::sum>(comm, st, c, op_kind::sum, pol);
                return;
            }
            for (const op_kind op : st.opt.ops)
                with_op(op, [&](auto op_tag) {
                    using Op = typename decltype(op_tag)::type;
                    bench_rows<T, Op>(comm, st, c, op, pol);
                });
        });
    });
}

void call_float_sum(const chorus::policy& pol, coll_kind c, comm_type& comm, std::span<const float> in,
                    std::span<float> out, bool inplace, int root) {
    call_collective<float, chorus::sum>(pol, c, comm, in, out, inplace, root);
}

} // namespace chorus_bench
