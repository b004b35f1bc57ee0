#pragma once
//! \file gpu.hpp
//! chorus on CUDA devices: the whole API of <chorus/chorus.hpp> plus the
//! GPU backend (chorus::gpu::make_communicators: every rank in this
//! process; chorus::gpu::make_communicator: one process per GPU, see
//! backend/gpu_process.hpp and, over MPI, <chorus/gpu_mpi.hpp>) and the
//! stream-ordered forms of every collective and of send/recv, group launch
//! (collectives/gpu_group.hpp: many small collectives as one launch), and the
//! training helpers' GPU layer (train/gpu.hpp; the helpers themselves are
//! in <chorus/train.hpp>). Include it from a .cu file compiled by nvcc
//! with -std=c++20 (and --extended-lambda for lambda operators).

#include "chorus.hpp"
#include "comm/make_communicators.hpp"
#include "collectives/gpu_group.hpp"
#include "collectives/gpu_p2p.hpp"
#include "collectives/gpu_stream.hpp"
#include "train/gpu.hpp"
