#pragma once
//! \file chorus.hpp
//! The whole public API: collectives over communicators, with element type,
//! reduction operator, algorithm policy and backend chosen at compile time.

#include "core/config.hpp"
#include "core/element.hpp"
#include "core/error.hpp"
#include "core/options.hpp"
#include "ops/operators.hpp"
#include "ops/traits.hpp"
#include "plan/partition.hpp"
#include "algo/schedule.hpp"
#include "algo/ring.hpp"
#include "algo/direct.hpp"
#include "algo/hierarchical.hpp"
#include "async/future.hpp"
#include "backend/threads.hpp"
#include "collectives/all_reduce.hpp"
#include "collectives/all_gather.hpp"
#include "collectives/reduce_scatter.hpp"
#include "collectives/broadcast.hpp"
#include "collectives/reduce.hpp"
#include "collectives/barrier.hpp"
