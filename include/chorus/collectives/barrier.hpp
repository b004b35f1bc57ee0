#pragma once
//! \file collectives/barrier.hpp
//! Barrier: returns on a rank once every rank has entered it. Each rank
//! posts its flag and polls its peers' (no central counter).

#include "../algo/ring.hpp"
#include "../async/future.hpp"
#include "../core/communicator.hpp"
#include "../ops/operators.hpp"
#include "checks.hpp"

namespace chorus {

template <class B>
void barrier(communicator<B>& comm) {
    comm.template launch<unsigned char, detail::copy_only>(policy_of<ring<>>, collective::barrier, nullptr, nullptr,
                                                           0, detail::copy_only{}, 0, false);
}
template <class B>
[[nodiscard]] future barrier_async(communicator<B>& comm) {
    return comm.template launch<unsigned char, detail::copy_only>(policy_of<ring<>>, collective::barrier, nullptr,
                                                                  nullptr, 0, detail::copy_only{}, 0, true);
}

} // namespace chorus
