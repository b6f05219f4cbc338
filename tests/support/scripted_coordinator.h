// SPDX-License-Identifier: Apache-2.0
// A coordinator scripted by a test, on 127.0.0.1:0, as a compromised or
// impersonated one would be to the machines that fetch its toolkits: its
// content store lists the toolkits the test serves (ListToolkits) and
// answers each ReadBlob with what the test stored or scripted (bytes that
// do not match their digest, a trickle, a blob that never ends, one far
// larger than memory); its WorkerService notes what each worker registers
// with (the toolchain it fingerprinted) and refuses it, so that a
// distcc-cuda-worker started with --served-toolkit ends once it has
// fetched and fingerprinted its toolkit. What the real client's
// `toolkit install --coordinator` and the real worker are tested against
// (tests/integration/hostile_coordinator_test.cc).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/store/digest.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"
#include "distcc_cuda/v1/worker.grpc.pb.h"

namespace distcc_cuda::testing {

class ScriptedCoordinator {
 public:
  // How ReadBlob answers for one digest.
  struct BlobScript {
    std::string bytes;  // sent in chunks, whatever the digest says
    // Instead of `bytes`: this many bytes of 'x', made as they are sent.
    int64_t generated_bytes = 0;
    size_t chunk_bytes = 1 << 20;                 // each chunk's size
    absl::Duration pause = absl::ZeroDuration();  // before each chunk
    // Sends chunks of `bytes` (or generated ones) until the reader cancels,
    // or for at most 10 minutes.
    bool endless = false;
  };

  // Serves on 127.0.0.1:0, insecure.
  static std::unique_ptr<ScriptedCoordinator> Start();
  ~ScriptedCoordinator();

  std::string address() const { return address_; }  // 127.0.0.1:PORT

  // Stores `bytes`: ReadBlob of their digest sends them. Their digest.
  Digest Put(const std::string& bytes);
  // From now on ReadBlob of `digest` answers as `script` says.
  void Script(const Digest& digest, BlobScript script);
  // ListToolkits answers `toolkits`, as they are.
  void Serve(std::vector<v1::ServedToolkit> toolkits);

  // The toolchains that workers registered with, in order (each refused).
  std::vector<v1::RegisterWorkerRequest> registrations();
  // ReadBlob calls begun for `digest`.
  int reads(const Digest& digest);
  // ReadBlob calls that ended because their reader cancelled them.
  int cancelled_reads();
  // Bytes sent by every ReadBlob so far.
  int64_t bytes_sent();

 private:
  class Store;
  class Workers;
  ScriptedCoordinator() = default;

  std::string address_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Workers> workers_;
  std::unique_ptr<grpc::Server> server_;

  absl::Notification stopping_;
  absl::Mutex mu_;
  std::map<std::string, BlobScript> blobs_ ABSL_GUARDED_BY(mu_);  // "HASH/SIZE"
  std::vector<v1::ServedToolkit> toolkits_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::RegisterWorkerRequest> registrations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> reads_ ABSL_GUARDED_BY(mu_);
  int cancelled_reads_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace distcc_cuda::testing
