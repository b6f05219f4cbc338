// SPDX-License-Identifier: Apache-2.0
#include "tests/support/scripted_coordinator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace distcc_cuda::testing {
namespace {

std::string KeyOf(const v1::Digest& digest) {
  return absl::StrCat(digest.hash(), "/", digest.size_bytes());
}

// The longest an endless or trickling blob is sent for.
constexpr absl::Duration kLongestRead = absl::Minutes(10);

}  // namespace

// ListToolkits and ReadBlob over the test's toolkits and scripts.
class ScriptedCoordinator::Store final : public v1::ContentStore::Service {
 public:
  explicit Store(ScriptedCoordinator* coordinator) : coordinator_(coordinator) {}

  grpc::Status ListToolkits(grpc::ServerContext*, const v1::ListToolkitsRequest*,
                            v1::ListToolkitsResponse* response) override {
    absl::MutexLock lock(&coordinator_->mu_);
    for (const v1::ServedToolkit& toolkit : coordinator_->toolkits_) {
      *response->add_toolkits() = toolkit;
    }
    return grpc::Status::OK;
  }

  grpc::Status ReadBlob(grpc::ServerContext* context, const v1::ReadBlobRequest* request,
                        grpc::ServerWriter<v1::ReadBlobResponse>* writer) override {
    BlobScript script;
    {
      absl::MutexLock lock(&coordinator_->mu_);
      const std::string key = KeyOf(request->digest());
      ++coordinator_->reads_[key];
      auto it = coordinator_->blobs_.find(key);
      if (it == coordinator_->blobs_.end()) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such blob");
      }
      script = it->second;
    }
    const std::string generated(std::min<size_t>(script.chunk_bytes, 1 << 20), 'x');
    const int64_t total = script.generated_bytes > 0 ? script.generated_bytes
                                                     : static_cast<int64_t>(script.bytes.size());
    const absl::Time give_up = absl::Now() + kLongestRead;
    int64_t offset = 0;
    do {
      for (int64_t at = 0; at < total || (total == 0 && at == 0);) {
        if (!Wait(context, script.pause) || absl::Now() > give_up) return Cancelled();
        const size_t size = static_cast<size_t>(
            std::min<int64_t>(total - at, static_cast<int64_t>(script.chunk_bytes)));
        v1::ReadBlobResponse chunk;
        chunk.set_offset(offset);
        if (script.generated_bytes > 0) {
          chunk.set_data(generated.substr(0, size));
        } else {
          chunk.set_data(script.bytes.substr(static_cast<size_t>(at), size));
        }
        if (!writer->Write(chunk)) return Cancelled();
        {
          absl::MutexLock lock(&coordinator_->mu_);
          coordinator_->bytes_sent_ += static_cast<int64_t>(size);
        }
        at += std::max<int64_t>(static_cast<int64_t>(size), 1);
        offset += static_cast<int64_t>(size);
      }
    } while (script.endless);
    return grpc::Status::OK;
  }

 private:
  // Waits `pause`; false as soon as the reader cancels or the server stops.
  bool Wait(grpc::ServerContext* context, absl::Duration pause) {
    const absl::Time until = absl::Now() + pause;
    while (!context->IsCancelled() && !coordinator_->stopping_.HasBeenNotified()) {
      const absl::Duration left = until - absl::Now();
      if (left <= absl::ZeroDuration()) return true;
      coordinator_->stopping_.WaitForNotificationWithTimeout(
          std::min(left, absl::Milliseconds(20)));
    }
    return false;
  }

  grpc::Status Cancelled() {
    absl::MutexLock lock(&coordinator_->mu_);
    ++coordinator_->cancelled_reads_;
    return grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away");
  }

  ScriptedCoordinator* coordinator_;
};

// Notes each registration and refuses it.
class ScriptedCoordinator::Workers final : public v1::WorkerService::Service {
 public:
  explicit Workers(ScriptedCoordinator* coordinator) : coordinator_(coordinator) {}

  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse*) override {
    absl::MutexLock lock(&coordinator_->mu_);
    coordinator_->registrations_.push_back(*request);
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "the scripted coordinator takes no workers");
  }

 private:
  ScriptedCoordinator* coordinator_;
};

std::unique_ptr<ScriptedCoordinator> ScriptedCoordinator::Start() {
  std::unique_ptr<ScriptedCoordinator> coordinator(new ScriptedCoordinator());
  coordinator->store_ = std::make_unique<Store>(coordinator.get());
  coordinator->workers_ = std::make_unique<Workers>(coordinator.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(coordinator->store_.get());
  builder.RegisterService(coordinator->workers_.get());
  coordinator->server_ = builder.BuildAndStart();
  EXPECT_NE(coordinator->server_, nullptr);
  EXPECT_NE(port, 0);
  coordinator->address_ = absl::StrCat("127.0.0.1:", port);
  return coordinator;
}

ScriptedCoordinator::~ScriptedCoordinator() {
  // Reads that trickle or never end stop at once.
  stopping_.Notify();
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
}

Digest ScriptedCoordinator::Put(const std::string& bytes) {
  const Digest digest = DigestOf(bytes);
  BlobScript script;
  script.bytes = bytes;
  Script(digest, std::move(script));
  return digest;
}

void ScriptedCoordinator::Script(const Digest& digest, BlobScript script) {
  absl::MutexLock lock(&mu_);
  blobs_[KeyOf(ToProto(digest))] = std::move(script);
}

void ScriptedCoordinator::Serve(std::vector<v1::ServedToolkit> toolkits) {
  absl::MutexLock lock(&mu_);
  toolkits_ = std::move(toolkits);
}

std::vector<v1::RegisterWorkerRequest> ScriptedCoordinator::registrations() {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

int ScriptedCoordinator::reads(const Digest& digest) {
  absl::MutexLock lock(&mu_);
  auto it = reads_.find(KeyOf(ToProto(digest)));
  return it == reads_.end() ? 0 : it->second;
}

int ScriptedCoordinator::cancelled_reads() {
  absl::MutexLock lock(&mu_);
  return cancelled_reads_;
}

int64_t ScriptedCoordinator::bytes_sent() {
  absl::MutexLock lock(&mu_);
  return bytes_sent_;
}

}  // namespace distcc_cuda::testing
