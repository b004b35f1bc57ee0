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

//! The fixed-size call description ranks exchange in checked mode.
struct mpi_signature {
    call_signature sig;
    char type_name[48], op_name[48], algo_name[96];

    static void copy(char* dst, std::size_t n, const char* src) {
        std::strncpy(dst, src, n - 1);
        dst[n - 1] = '\0';
    }
    static mpi_signature of(const descriptor& d) {
        mpi_signature s{};
        s.sig = d.sig;
        copy(s.type_name, sizeof s.type_name, d.type_name);
        copy(s.op_name, sizeof s.op_name, d.op_name);
        copy(s.algo_name, sizeof s.algo_name, d.algo_name);
        return s;
    }
    descriptor to_descriptor() const {
        descriptor d{};
        d.sig = sig;
        d.type_name = type_name;
        d.op_name = op_name;
        d.algo_name = algo_name;
        return d;
    }
};

//! What a send announces (count, element size and type) and what the
//! receiver replies (ok: it took the data; else what it expected).
struct p2p_header {
    std::uint64_t count, elem_bytes, type_id, ok;
    char type_name[40];
};

} // namespace chorus::detail
