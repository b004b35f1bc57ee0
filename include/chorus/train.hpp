#pragma once
//! \file train.hpp
//! Data-parallel training helpers over any chorus communicator (namespace
//! chorus::train): gradient buckets that overlap the AllReduce with the
//! backward pass, gradient accumulation (hybrid mode), bounded-staleness
//! asynchronous updates, gradient clipping and learning-rate warm-up, a
//! straggler injector for experiments, and a ZeRO-style sharded optimizer
//! step. Include a backend too (chorus/chorus.hpp). Tutorial: docs/training.md.

#include "train/check.hpp"
#include "train/memory.hpp"
#include "train/buckets.hpp"
#include "train/accumulate.hpp"
#include "train/schedule.hpp"
#include "train/staleness.hpp"
#include "train/straggler.hpp"
#include "train/zero.hpp"
