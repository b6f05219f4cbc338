// SPDX-License-Identifier: Apache-2.0
// The workers the coordinator knows: what each said of itself when it
// registered, who registered it (the name in its certificate), its leases
// and its load, and what the cluster they make offers a build. Not
// thread-safe: the scheduler's lock guards it.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/scheduler/admission.h"
#include "distcc_cuda/v1/build.pb.h"
#include "distcc_cuda/v1/worker.pb.h"

namespace distcc_cuda::coordinator {

// Who is on the other end of a worker call, as the coordinator's access
// control established it (the name in its certificate, or "local").
struct WorkerPeer {
  std::string name = "local";
  // Authenticated workers' results enter the result cache; others' (a
  // coordinator started with --insecure) are used for their build only.
  bool authenticated = true;
};

// What the workers that can take a build offer, for choosing unit sizes.
struct ClusterCapacity {
  int64_t smallest_usable_cap = 0;  // cap less headroom of the smallest worker
  int total_slots = 0;
  // The least usable memory per slot of any worker: a unit predicted above
  // it leaves slots idle there, because memory runs out first.
  int64_t smallest_memory_per_slot = 0;
};

struct WorkerState {
  v1::RegisterWorkerRequest info;
  WorkerPeer peer;
  absl::Time last_heartbeat;
  std::set<std::string> tasks;  // its leases (task ids)
  int64_t reserved_bytes = 0;
  int64_t completed = 0;
  int64_t memory_used_bytes = 0;  // at its last heartbeat

  // What admission sees of it.
  WorkerLoad Load() const;
};

// INVALID_ARGUMENT, saying what is wrong, for a registration the scheduler
// must not take: a name that is not plain, no slots or cap (or absurd ones),
// no toolchain, descriptions with control characters or too long. Needs no
// lock.
absl::Status CheckRegistration(const v1::RegisterWorkerRequest& request);

// The most further toolchains (served toolkits) one worker may offer.
inline constexpr int kMaxMoreToolchains = 8;

// A worker's toolchains: its own first, then those of the further served
// toolkits it compiles with (RegisterWorkerRequest.more_toolchains).
std::vector<const v1::ToolchainFingerprint*> ToolchainsOf(const v1::RegisterWorkerRequest& worker);
// Whether the worker compiles with toolchain `toolchain_digest`, its own or
// a further one.
bool HasToolchain(const v1::RegisterWorkerRequest& worker, const std::string& toolchain_digest);

class WorkerRegistry {
 public:
  using Workers = std::map<std::string, WorkerState>;

  // Adds a worker under `id` (checked by CheckRegistration). RESOURCE_EXHAUSTED
  // when `peer` has the most workers one certificate may have.
  absl::Status Add(const std::string& id, const v1::RegisterWorkerRequest& request,
                   const WorkerPeer& peer, absl::Time now);
  void Remove(const std::string& id) { workers_.erase(id); }

  // The worker `id` if `peer` registered it: NOT_FOUND or PERMISSION_DENIED
  // otherwise, and then, if `refusal` is given, the line for the operator
  // (who used whose id), for the caller to log once its lock is released.
  absl::StatusOr<WorkerState*> Of(const std::string& id, const WorkerPeer& peer,
                                  std::string* refusal = nullptr);
  // The worker `id`, or null.
  WorkerState* Find(const std::string& id);
  const WorkerState* Find(const std::string& id) const;

  bool empty() const { return workers_.empty(); }
  Workers::const_iterator begin() const { return workers_.begin(); }
  Workers::const_iterator end() const { return workers_.end(); }

  // Whether any worker has toolchain `toolchain_digest`.
  bool Serves(const std::string& toolchain_digest) const;
  // The largest cap of the workers with toolchain `toolchain_digest` (0: none).
  int64_t LargestCap(const std::string& toolchain_digest) const;
  // Their smallest usable cap and their slots; zero slots when none is there.
  ClusterCapacity Capacity(const std::string& toolchain_digest) const;
  // How many certificate identities but those in `excluding` have a worker
  // with toolchain `toolchain_digest`.
  int PeersWith(const std::string& toolchain_digest, const std::set<std::string>& excluding) const;
  // The ids of the workers `peer` registered.
  std::vector<std::string> IdsOf(const std::string& peer) const;
  // The ids of the workers with no heartbeat for longer than `timeout`.
  std::vector<std::string> Silent(absl::Time now, absl::Duration timeout) const;
  // Each worker as ClusterStatus shows it.
  void AddTo(v1::ClusterStatus& status, absl::Time now) const;

 private:
  Workers workers_;
};

}  // namespace distcc_cuda::coordinator
