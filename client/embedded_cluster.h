// SPDX-License-Identifier: Apache-2.0
// The embedded default: an in-process coordinator and one local worker, so
// `distcc-cuda build` with no cluster still gets memory-aware scheduling.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls_credentials.h"
#include "coordinator/coordinator.h"
#include "worker/worker.h"

namespace distcc_cuda::client {

// Where the embedded default keeps its state when --state-dir does not say:
// $XDG_CACHE_HOME/distcc-cuda, else ~/.cache/distcc-cuda.
std::string DefaultStateDir();

class EmbeddedCluster {
 public:
  // Starts both on 127.0.0.1 with state under `state_dir`, speaking mutual
  // TLS with certificates made for this run (client_tls() is the client's);
  // the worker gets
  // `slots` (0: the usable cores) and the machine's default memory cap, and
  // sandboxes every compile unless `sandbox` is false.
  static absl::StatusOr<std::unique_ptr<EmbeddedCluster>> Start(const std::string& state_dir,
                                                                const std::string& nvcc, int slots,
                                                                bool sandbox = true);

  std::string address() const { return coordinator_->address(); }
  // The client certificate of this run, for the build's channel.
  const TlsMaterial& client_tls() const { return client_tls_; }
  int slots() const { return slots_; }
  int64_t memory_cap_bytes() const { return memory_cap_bytes_; }
  // How the worker isolates compiles (Worker::sandbox_description).
  std::string sandbox_description() const { return worker_->sandbox_description(); }

 private:
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<worker::Worker> worker_;  // destroyed first
  TlsMaterial client_tls_;
  int slots_ = 0;
  int64_t memory_cap_bytes_ = 0;
};

// A channel to the coordinator at `address` once it answers: `embedded`'s
// (with its certificates) when not null, else a cluster's (over `tls` if
// set). UNAVAILABLE within `timeout`, saying what to check.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectToCoordinator(
    const std::string& address, const EmbeddedCluster* embedded,
    const std::optional<TlsMaterial>& tls, absl::Duration timeout);

}  // namespace distcc_cuda::client
