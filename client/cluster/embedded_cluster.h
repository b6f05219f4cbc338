// SPDX-License-Identifier: Apache-2.0
// The embedded default: an in-process coordinator and one local worker, so
// `distcc-cuda build` with no cluster still gets memory-aware scheduling.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/plan/options.h"
#include "common/base/machine_slots.h"
#include "common/transport/tls_credentials.h"
#include "coordinator/coordinator.h"
#include "worker/worker.h"

namespace distcc_cuda::client {

class EmbeddedCluster {
 public:
  // Starts both in this process with state under `state_dir`: the
  // coordinator listens on no address, and the worker and the build reach it
  // through in-process channels (channel()), so no other process or user of
  // this machine can submit to it or work for it, and no certificate or
  // handshake is needed; the worker gets
  // `slots` (0: the usable cores) and the machine's default memory cap, and
  // sandboxes every compile unless `sandbox` is false.
  // With `worker_in_background` only the coordinator has started when
  // Start returns; the worker starts on a thread of its own (its toolkit
  // fingerprint, sandbox probe, store and registration: about 55 ms), beside
  // the build's command, whose cached units need no worker. WorkerStarted()
  // says how that went.
  // With `remote`, the worker compiles nothing here: it sends each unit to
  // that engine, with `remote`'s jobs as its slots and its memory as its cap.
  static absl::StatusOr<std::unique_ptr<EmbeddedCluster>> Start(
      const std::string& state_dir, const std::string& nvcc, int slots, bool sandbox = true,
      bool worker_in_background = false, const RemoteEngineSettings* remote = nullptr);
  ~EmbeddedCluster();

  // Waits for the worker's start: OK, or why it cannot compile here (what
  // Start returns for a worker started in the foreground).
  absl::Status WorkerStarted();

  // For messages: it has no network address.
  std::string address() const { return coordinator_->address(); }
  // The build's channel to it.
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  int slots() const { return slots_; }
  int64_t memory_cap_bytes() const { return memory_cap_bytes_; }
  // This machine's slots: the worker's compiles hold them, and so must
  // what the build runs here itself (scans, compiles and links run here).
  const std::shared_ptr<MachineSlots>& machine_slots() const { return machine_slots_; }
  // How the worker isolates compiles (Worker::sandbox_description); waits
  // for its start.
  std::string sandbox_description();

 private:
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<worker::Worker> worker_;  // destroyed first
  std::thread worker_start_;
  absl::Notification worker_started_;
  absl::Status worker_status_;  // set before worker_started_ is notified
  std::shared_ptr<grpc::Channel> channel_;
  int slots_ = 0;
  int64_t memory_cap_bytes_ = 0;
  std::shared_ptr<MachineSlots> machine_slots_;
};

// A channel to the coordinator at `address`: `embedded`'s in-process one
// when not null, else a cluster's (over `tls` if set) once it answers.
// UNAVAILABLE within `timeout`, saying what to check.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectToCoordinator(
    const std::string& address, const EmbeddedCluster* embedded,
    const std::optional<TlsMaterial>& tls, absl::Duration timeout);

// The cluster a build runs on: the coordinator at an address, or the
// embedded default this process started because none was given.
struct ClusterConnection {
  std::unique_ptr<EmbeddedCluster> embedded;  // null on a cluster
  std::string address;                        // for messages
  std::shared_ptr<grpc::Channel> channel;
};

// "distcc-cuda: compiling on the engine at grpc://...": what a build on
// another engine says first.
std::string DescribeRemoteEngine(const RemoteEngineSettings& remote);

// Connects first, so that an unreachable coordinator fails in seconds,
// before any scanning: to the coordinator `settings` name, or to the
// embedded default started here, saying so (its slots and memory cap) on
// `out`. ConnectToCoordinator's and EmbeddedCluster::Start's errors.
absl::StatusOr<ClusterConnection> ConnectToCluster(const ClusterSettings& settings,
                                                   std::ostream& out);

}  // namespace distcc_cuda::client
