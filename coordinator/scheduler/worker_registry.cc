// SPDX-License-Identifier: Apache-2.0
#include "coordinator/scheduler/worker_registry.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/terminal_text.h"

namespace distcc_cuda::coordinator {
namespace {

// Limits on what a registering worker says about itself: it is shown to
// people (status, summaries) and sizes the scheduler's work.
constexpr int kMaxSlots = 4096;
constexpr int64_t kMaxCapBytes = int64_t{1} << 50;  // 1 PiB
constexpr size_t kMaxDescription = 512;
// Workers one certificate may have registered at once (a Compose deployment
// shares one worker certificate among its scaled workers).
constexpr int kMaxWorkersPerPeer = 1024;

// Text a terminal shows as it is (no controls, escapes or bidirectional
// overrides), within `limit` bytes.
bool Printable(const std::string& text, size_t limit) {
  return text.size() <= limit && IsTerminalSafe(text);
}

bool PlainName(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

}  // namespace

WorkerLoad WorkerState::Load() const {
  return WorkerLoad{info.memory_cap_bytes(), reserved_bytes, info.slots(),
                    static_cast<int>(tasks.size())};
}

absl::Status CheckRegistration(const v1::RegisterWorkerRequest& request) {
  const std::string& name = request.name();
  if (!PlainName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker name '", absl::CHexEscape(name.substr(0, 64)),
                     "' is not 1 to 64 of letters, digits and _ . -"));
  }
  if (request.slots() <= 0 || request.memory_cap_bytes() <= 0 || request.slots() > kMaxSlots ||
      request.memory_cap_bytes() > kMaxCapBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", name, "' offers ", request.slots(), " slots and a memory cap of ",
                     request.memory_cap_bytes(), " bytes; both must be positive (at most ",
                     kMaxSlots, " slots and 1 PiB)"));
  }
  if (request.toolchain().digest().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", name, "' sent no toolchain fingerprint"));
  }
  if (request.more_toolchains_size() > kMaxMoreToolchains) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker '", name, "' offers ", request.more_toolchains_size(),
                     " further toolchains; at most ", kMaxMoreToolchains));
  }
  std::vector<const std::string*> texts = {&request.memory_mechanism(), &request.sandbox(),
                                           &request.toolkit_source()};
  for (const v1::ToolchainFingerprint* toolchain : ToolchainsOf(request)) {
    if (toolchain->digest().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker '", name, "' offers a toolchain without its digest"));
    }
    texts.insert(texts.end(),
                 {&toolchain->nvcc_release(), &toolchain->nvcc_build(), &toolchain->nvcc_version(),
                  &toolchain->nvcc_path(), &toolchain->host_compiler(), &toolchain->digest(),
                  &toolchain->cuda_version_header()});
  }
  for (const std::string* text : texts) {
    if (!Printable(*text, kMaxDescription)) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker '", name, "' describes itself with control characters or over ",
                       kMaxDescription, " bytes"));
    }
  }
  return absl::OkStatus();
}

std::vector<const v1::ToolchainFingerprint*> ToolchainsOf(const v1::RegisterWorkerRequest& worker) {
  std::vector<const v1::ToolchainFingerprint*> toolchains = {&worker.toolchain()};
  for (const v1::ToolchainFingerprint& more : worker.more_toolchains()) {
    toolchains.push_back(&more);
  }
  return toolchains;
}

bool HasToolchain(const v1::RegisterWorkerRequest& worker, const std::string& toolchain_digest) {
  if (worker.toolchain().digest() == toolchain_digest) return true;
  return std::any_of(
      worker.more_toolchains().begin(), worker.more_toolchains().end(),
      [&](const v1::ToolchainFingerprint& more) { return more.digest() == toolchain_digest; });
}

absl::Status WorkerRegistry::Add(const std::string& id, const v1::RegisterWorkerRequest& request,
                                 const WorkerPeer& peer, absl::Time now) {
  const int of_peer = static_cast<int>(IdsOf(peer.name).size());
  if (of_peer >= kMaxWorkersPerPeer) {
    return absl::ResourceExhaustedError(
        absl::StrCat(peer.name, " has ", of_peer,
                     " workers registered, the most one certificate may have; "
                     "give each machine's worker a certificate of its own"));
  }
  WorkerState state;
  state.info = request;
  state.peer = peer;
  state.last_heartbeat = now;
  workers_[id] = std::move(state);
  return absl::OkStatus();
}

absl::StatusOr<WorkerState*> WorkerRegistry::Of(const std::string& id, const WorkerPeer& peer,
                                                std::string* refusal) {
  WorkerState* worker = Find(id);
  if (worker == nullptr) {
    return absl::NotFoundError(absl::StrCat("worker ", id, " is not registered; register again"));
  }
  if (worker->peer.name != peer.name) {
    if (refusal != nullptr) {
      *refusal = absl::StrCat(peer.name, " used the id of worker ", worker->info.name(), " (",
                              worker->peer.name, "); refused");
    }
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", id, " was registered by another peer"));
  }
  return worker;
}

WorkerState* WorkerRegistry::Find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const WorkerState* WorkerRegistry::Find(const std::string& id) const {
  return const_cast<WorkerRegistry*>(this)->Find(id);
}

bool WorkerRegistry::Serves(const std::string& toolchain_digest) const {
  return std::any_of(workers_.begin(), workers_.end(), [&](const auto& worker) {
    return HasToolchain(worker.second.info, toolchain_digest);
  });
}

int64_t WorkerRegistry::LargestCap(const std::string& toolchain_digest) const {
  int64_t largest = 0;
  for (const auto& [id, worker] : workers_) {
    if (HasToolchain(worker.info, toolchain_digest)) {
      largest = std::max(largest, worker.info.memory_cap_bytes());
    }
  }
  return largest;
}

ClusterCapacity WorkerRegistry::Capacity(const std::string& toolchain_digest) const {
  ClusterCapacity capacity;
  for (const auto& [id, worker] : workers_) {
    if (!HasToolchain(worker.info, toolchain_digest)) continue;
    int64_t cap = worker.info.memory_cap_bytes();
    int64_t usable = cap - AdmissionHeadroom(cap);
    const int64_t per_slot = usable / std::max(1, worker.info.slots());
    capacity.smallest_usable_cap =
        capacity.total_slots == 0 ? usable : std::min(capacity.smallest_usable_cap, usable);
    capacity.smallest_memory_per_slot = capacity.total_slots == 0
                                            ? per_slot
                                            : std::min(capacity.smallest_memory_per_slot, per_slot);
    capacity.total_slots += worker.info.slots();
  }
  return capacity;
}

int WorkerRegistry::PeersWith(const std::string& toolchain_digest,
                              const std::set<std::string>& excluding) const {
  std::set<std::string> peers;
  for (const auto& [id, worker] : workers_) {
    if (HasToolchain(worker.info, toolchain_digest) && !excluding.count(worker.peer.name)) {
      peers.insert(worker.peer.name);
    }
  }
  return peers.size();
}

std::vector<std::string> WorkerRegistry::IdsOf(const std::string& peer) const {
  std::vector<std::string> ids;
  for (const auto& [id, worker] : workers_) {
    if (worker.peer.name == peer) ids.push_back(id);
  }
  return ids;
}

std::vector<std::string> WorkerRegistry::Silent(absl::Time now, absl::Duration timeout) const {
  std::vector<std::string> silent;
  for (const auto& [id, worker] : workers_) {
    if (now - worker.last_heartbeat > timeout) silent.push_back(id);
  }
  return silent;
}

void WorkerRegistry::AddTo(v1::ClusterStatus& status, absl::Time now) const {
  for (const auto& [id, worker] : workers_) {
    auto* out = status.add_workers();
    out->set_name(worker.info.name());
    *out->mutable_toolchain() = worker.info.toolchain();
    out->set_memory_cap_bytes(worker.info.memory_cap_bytes());
    out->set_slots(worker.info.slots());
    out->set_running_tasks(worker.tasks.size());
    out->set_tasks_completed(worker.completed);
    out->set_seconds_since_heartbeat(absl::ToInt64Seconds(now - worker.last_heartbeat));
    out->set_memory_mechanism(worker.info.memory_mechanism());
    out->set_sandbox(worker.info.sandbox());
    out->set_toolkit_source(worker.info.toolkit_source());
    *out->mutable_more_toolchains() = worker.info.more_toolchains();
    out->set_reserved_bytes(worker.reserved_bytes);
    out->set_memory_used_bytes(worker.memory_used_bytes);
  }
}

}  // namespace distcc_cuda::coordinator
