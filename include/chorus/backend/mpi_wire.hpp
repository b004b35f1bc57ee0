#pragma once
//! \file backend/mpi_wire.hpp
//! What MPI ranks send each other besides data: the call signature checked
//! mode exchanges (core/signature.hpp, with its names as text) and the
//! header of a send/recv message. Part of backend/mpi.hpp, which includes it.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../core/signature.hpp"
#include "host_common.hpp"

namespace chorus::detail {

//! What a send announces (count, element size and type) and what the
//! receiver replies (ok: it took the data; else what it expected).
struct p2p_header {
    std::uint64_t count, elem_bytes, type_id, ok;
    char type_name[40];
};

} // namespace chorus::detail
