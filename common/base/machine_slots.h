// SPDX-License-Identifier: Apache-2.0
// The slots of one machine that everything heavy run on it shares. On the
// embedded default the build's own machine is its worker: the worker's
// compiles, the client's include scans and what the launcher runs here
// (compiles the cluster cannot take, links) each hold one slot while they
// run, so that together they never run more at once than the machine has
// slots, whichever started them.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "common/base/cancellation.h"

namespace distcc_cuda {

class MachineSlots {
 public:
  explicit MachineSlots(int slots);
  MachineSlots(const MachineSlots&) = delete;
  MachineSlots& operator=(const MachineSlots&) = delete;

  // One slot, held until destroyed.
  class Held {
   public:
    Held(Held&& other) noexcept : slots_(other.slots_) { other.slots_ = nullptr; }
    Held& operator=(Held&& other) noexcept;
    ~Held();

   private:
    friend class MachineSlots;
    explicit Held(MachineSlots* slots) : slots_(slots) {}
    MachineSlots* slots_;
  };

  // Waits for a free slot; nullopt once `cancel` (may be null) is cancelled
  // first.
  std::optional<Held> Acquire(const CancelToken* cancel = nullptr);
  // The same, giving up once `give_up` (asked every 100 ms while waiting)
  // says so.
  std::optional<Held> Acquire(const std::function<bool()>& give_up);

  int slots() const { return slots_; }
  int in_use() const;
  // The most held at once so far, for tests and benchmarks.
  int most_in_use() const;

 private:
  void Release();

  const int slots_;
  mutable absl::Mutex mu_;
  int in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int most_in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace distcc_cuda
