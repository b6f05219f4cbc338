// SPDX-License-Identifier: Apache-2.0
// The memory retry ladder: what to do with a unit a worker's memory cap
// stopped, from what its kills taught. A pure function of the facts, so
// that each rung can be read and tested on its own; the scheduler applies
// the step it returns.
#pragma once

#include <cstdint>
#include <string>

namespace distcc_cuda::coordinator {

// What is known when a unit is killed for memory.
struct MemoryKill {
  int kills = 0;                // the unit's memory kills, this one included
  int64_t peak_seen = 0;        // the most it was seen to need (what it held, what it reserved)
  int64_t worker_cap = 0;       // the cap of the worker that stopped it
  int64_t largest_cap = 0;      // the largest cap of the workers with its build's toolchain
  bool alone = false;           // it already ran alone on a worker
  int64_t needs_cap_above = 0;  // it already waits for a worker with a cap above this
  bool splittable = false;      // it can be made into smaller units
};

// The rungs, in the order a unit climbs them.
enum class RetryRung {
  kReserveMore,   // run again reserving a quarter above the peak seen
  kRunAlone,      // run again alone on a worker, with its whole cap
  kLargerWorker,  // run again only on a worker with a larger cap
  kSplit,         // replace it by smaller units (fewer instantiations or targets)
  kGiveUp,        // fail it: nothing in the cluster can hold it
};

struct RetryStep {
  RetryRung rung = RetryRung::kGiveUp;
  int64_t reservation_floor = 0;  // kReserveMore: reserve at least this
  int64_t needs_cap_above = 0;    // kLargerWorker: only on a cap above this
};

// The next rung for a unit after `kill`. A larger reservation is tried once,
// on the first kill, and only if it fits the worker's usable cap; a larger
// worker only if one has a cap above both the killing worker's and the one
// it already waited for.
RetryStep NextRetry(const MemoryKill& kill);

// "retrying with 375 MiB reserved", "retrying alone on a worker", "retrying
// on a worker with a cap above 1.0 GiB": what the unit's client is told.
// Empty for kSplit and kGiveUp, whose messages name more.
std::string DescribeRetry(const RetryStep& step, int64_t worker_cap);

}  // namespace distcc_cuda::coordinator
