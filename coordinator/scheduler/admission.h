// SPDX-License-Identifier: Apache-2.0
// Memory admission: whether a queued unit may start on a worker now, what it
// reserves there, and when a unit that must wait for memory lets smaller
// ones fill in behind it (EASY backfilling). Pure functions of what the
// scheduler knows of the unit and the worker, so that each rule can be read
// and tested on its own; the scheduler asks them under its lock.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"

namespace distcc_cuda::coordinator {

// Memory a worker keeps free beyond its reservations: 2% of the cap, at
// least 64 MiB (page cache and nvcc's own small processes).
int64_t AdmissionHeadroom(int64_t cap_bytes);

// What admission sees of a worker.
struct WorkerLoad {
  int64_t cap_bytes = 0;
  int64_t reserved_bytes = 0;
  int slots = 0;
  int running = 0;
};

// The memory to reserve on a worker for a unit predicted at `peak_bytes`:
// the prediction, but never more than the worker can hold (a unit predicted
// above a worker's cap takes the whole worker).
int64_t ReservationOn(const WorkerLoad& worker, int64_t peak_bytes);

// True if a unit reserving `reservation` may start now: a slot is free and
// the reservations, the new one included, fit the cap less the headroom.
bool Admits(const WorkerLoad& worker, int64_t reservation);

// What admission needs of a queued unit: its prediction, and what the
// memory retry ladder has added to it after kills.
struct UnitNeeds {
  int64_t peak_bytes = 0;         // predicted
  absl::Duration wall;            // predicted
  int64_t reservation_floor = 0;  // reserve at least this much
  bool alone = false;             // only on an otherwise idle worker, all of it
  int64_t needs_cap_above = 0;    // only on a worker whose cap is larger
};

// What `unit` reserves on a worker of `load`, or nullopt if it may not start
// there now. Without `memory_admission` (a static job limit, as `ninja -j`):
// a free slot, reserving nothing.
std::optional<int64_t> Admission(const UnitNeeds& unit, const WorkerLoad& load,
                                 bool memory_admission = true);

// A unit running on a worker: when it was leased, how long it is predicted
// to run, what it reserved.
struct RunningUnit {
  absl::Time leased_at;
  absl::Duration wall;
  int64_t reserved_bytes = 0;
};

// When the first unit of the queue, `head`, must wait for memory on a
// worker: the time it could start there, as the running units' predicted
// ends free their memory, and what would be left beside it then.
struct BackfillWindow {
  absl::Time start;
  int64_t leftover_bytes = 0;
};

// The window of `head` on a worker of `load` running `running`: the first
// predicted end after which it fits (a head larger than the worker fits the
// idle worker). Nullopt when it waits for no end here (it runs alone, needs a
// larger cap, or nothing runs): then nothing holds the others back.
std::optional<BackfillWindow> WindowFor(const UnitNeeds& head, const WorkerLoad& load,
                                        std::vector<RunningUnit> running, absl::Time now);

// True if a unit admitted with `reservation` may start now ahead of a head
// waiting for `window`: it ends before the head could start, or leaves the
// head its room. Always true without a window.
bool BackfillAllows(const std::optional<BackfillWindow>& window, const UnitNeeds& unit,
                    int64_t reservation, absl::Time now);

}  // namespace distcc_cuda::coordinator
