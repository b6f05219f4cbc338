// SPDX-License-Identifier: Apache-2.0
#include "common/base/machine_slots.h"

#include <algorithm>

namespace distcc_cuda {

MachineSlots::MachineSlots(int slots) : slots_(std::max(1, slots)) {}

MachineSlots::Held::~Held() {
  if (slots_ != nullptr) slots_->Release();
}

MachineSlots::Held& MachineSlots::Held::operator=(Held&& other) noexcept {
  if (this != &other) {
    if (slots_ != nullptr) slots_->Release();
    slots_ = other.slots_;
    other.slots_ = nullptr;
  }
  return *this;
}

std::optional<MachineSlots::Held> MachineSlots::Acquire(const CancelToken* cancel) {
  return Acquire([cancel] { return cancel != nullptr && cancel->cancelled(); });
}

std::optional<MachineSlots::Held> MachineSlots::Acquire(const std::function<bool()>& give_up) {
  absl::MutexLock lock(&mu_);
  auto free = +[](MachineSlots* self)
                   ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->in_use_ < self->slots_; };
  while (!mu_.AwaitWithTimeout(absl::Condition(free, this), absl::Milliseconds(100))) {
    if (give_up()) return std::nullopt;
  }
  ++in_use_;
  most_in_use_ = std::max(most_in_use_, in_use_);
  return Held(this);
}

void MachineSlots::Release() {
  absl::MutexLock lock(&mu_);
  --in_use_;
}

int MachineSlots::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

int MachineSlots::most_in_use() const {
  absl::MutexLock lock(&mu_);
  return most_in_use_;
}

}  // namespace distcc_cuda
