// SPDX-License-Identifier: Apache-2.0
#include "tests/support/scripted_engine.h"

#include <gtest/gtest.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "google/longrunning/operations.pb.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::testing {
namespace {

using Operation = google::longrunning::Operation;

std::string KeyOf(const reapi::Digest& digest) {
  return absl::StrCat(digest.hash(), "/", digest.size_bytes());
}

// "HASH/SIZE" of a ByteStream resource ("[INSTANCE/][uploads/UUID/]blobs/HASH/SIZE[/...]").
std::string KeyOfResource(const std::string& resource) {
  const size_t at = resource.find("blobs/");
  if (at == std::string::npos) return "";
  std::vector<std::string> parts = absl::StrSplit(resource.substr(at + 6), '/');
  return parts.size() < 2 ? "" : absl::StrCat(parts[0], "/", parts[1]);
}

// What the engine's compiles return: the fake nvcc's object of a source
// that says where it came from, made once per test process.
const std::string& EngineObject() {
  static const std::string* object = [] {
    const std::string dir = NewTempDir("scripted-engine-");
    EXPECT_TRUE(
        WriteFileAtomically(dir + "/engine.cu", "// compiled by the scripted engine\n").ok());
    ProcessSpec spec;
    spec.argv = {FakeNvccPath(), "-c", "engine.cu", "-o", "engine.o"};
    spec.working_directory = dir;
    absl::StatusOr<ProcessResult> ran = RunProcess(spec);
    EXPECT_TRUE(ran.ok() && ran->exit_code == 0) << ran.status();
    absl::StatusOr<std::string> bytes = ReadFile(dir + "/engine.o");
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return new std::string(bytes.value_or(""));
  }();
  return *object;
}

}  // namespace

// The engine's four services over its store and script.
class ScriptedEngine::Services {
 public:
  explicit Services(ScriptedEngine* engine)
      : capabilities_(engine),
        store_(engine),
        bytestream_(engine),
        execution_(engine),
        action_cache_(engine) {}

  void RegisterWith(grpc::ServerBuilder& builder) {
    builder.RegisterService(&capabilities_);
    builder.RegisterService(&store_);
    builder.RegisterService(&bytestream_);
    builder.RegisterService(&execution_);
    builder.RegisterService(&action_cache_);
  }

 private:
  class Capabilities final : public reapi::Capabilities::Service {
   public:
    explicit Capabilities(ScriptedEngine*) {}
    grpc::Status GetCapabilities(grpc::ServerContext*, const reapi::GetCapabilitiesRequest*,
                                 reapi::ServerCapabilities* answer) override {
      answer->mutable_execution_capabilities()->set_exec_enabled(true);
      answer->mutable_execution_capabilities()->set_digest_function(reapi::DigestFunction::SHA256);
      answer->mutable_cache_capabilities()->add_digest_functions(reapi::DigestFunction::SHA256);
      return grpc::Status::OK;
    }
  };

  class Store final : public reapi::ContentAddressableStorage::Service {
   public:
    explicit Store(ScriptedEngine* engine) : engine_(engine) {}
    grpc::Status FindMissingBlobs(grpc::ServerContext*, const reapi::FindMissingBlobsRequest* asked,
                                  reapi::FindMissingBlobsResponse* answer) override {
      absl::MutexLock lock(&engine_->mu_);
      for (const reapi::Digest& digest : asked->blob_digests()) {
        if (!engine_->blobs_.count(KeyOf(digest))) *answer->add_missing_blob_digests() = digest;
      }
      return grpc::Status::OK;
    }
    grpc::Status BatchUpdateBlobs(grpc::ServerContext* context,
                                  const reapi::BatchUpdateBlobsRequest* sent,
                                  reapi::BatchUpdateBlobsResponse* answer) override {
      if (Held(*sent)) {
        WaitWhileHeld(*context);
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the scripted engine held this upload");
      }
      for (const auto& request : sent->requests()) {
        reapi::BatchUpdateBlobsResponse::Response* response = answer->add_responses();
        *response->mutable_digest() = request.digest();
        if (KeyOf(engine_->Put(request.data())) != KeyOf(request.digest())) {
          response->mutable_status()->set_code(grpc::StatusCode::INVALID_ARGUMENT);
        }
      }
      return grpc::Status::OK;
    }
    grpc::Status BatchReadBlobs(grpc::ServerContext*, const reapi::BatchReadBlobsRequest* asked,
                                reapi::BatchReadBlobsResponse* answer) override {
      absl::MutexLock lock(&engine_->mu_);
      for (const reapi::Digest& digest : asked->digests()) {
        reapi::BatchReadBlobsResponse::Response* response = answer->add_responses();
        *response->mutable_digest() = digest;
        auto found = engine_->blobs_.find(KeyOf(digest));
        if (found == engine_->blobs_.end()) {
          response->mutable_status()->set_code(grpc::StatusCode::NOT_FOUND);
          continue;
        }
        engine_->reads_.push_back(found->first);
        response->set_data(found->second);
      }
      return grpc::Status::OK;
    }

   private:
    // Whether the batch has a blob the engine holds uploads of.
    bool Held(const reapi::BatchUpdateBlobsRequest& sent) {
      absl::MutexLock lock(&engine_->mu_);
      if (engine_->held_needle_.empty()) return false;
      for (const auto& request : sent.requests()) {
        if (request.data().find(engine_->held_needle_) != std::string::npos) return true;
      }
      return false;
    }
    // Until the caller cancels the call, at most 60 s.
    void WaitWhileHeld(grpc::ServerContext& context) {
      {
        absl::MutexLock lock(&engine_->mu_);
        ++engine_->held_;
        ++engine_->held_running_;
      }
      const absl::Time give_up = absl::Now() + absl::Seconds(60);
      while (!context.IsCancelled() && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      absl::MutexLock lock(&engine_->mu_);
      --engine_->held_running_;
      if (context.IsCancelled()) ++engine_->held_cancelled_;
    }

    ScriptedEngine* engine_;
  };

  class ByteStream final : public google::bytestream::ByteStream::Service {
   public:
    explicit ByteStream(ScriptedEngine* engine) : engine_(engine) {}
    grpc::Status Read(grpc::ServerContext*, const google::bytestream::ReadRequest* request,
                      grpc::ServerWriter<google::bytestream::ReadResponse>* writer) override {
      std::string bytes;
      {
        absl::MutexLock lock(&engine_->mu_);
        const std::string key = KeyOfResource(request->resource_name());
        engine_->reads_.push_back(key);
        auto found = engine_->blobs_.find(key);
        if (found == engine_->blobs_.end()) {
          return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such blob on the scripted engine");
        }
        bytes = found->second;
      }
      constexpr size_t kChunk = 1 << 20;
      for (size_t at = static_cast<size_t>(request->read_offset()); at < bytes.size();
           at += kChunk) {
        google::bytestream::ReadResponse chunk;
        chunk.set_data(bytes.substr(at, kChunk));
        if (!writer->Write(chunk)) break;
      }
      return grpc::Status::OK;
    }
    grpc::Status Write(grpc::ServerContext*,
                       grpc::ServerReader<google::bytestream::WriteRequest>* reader,
                       google::bytestream::WriteResponse* answer) override {
      google::bytestream::WriteRequest request;
      std::string resource, bytes;
      while (reader->Read(&request)) {
        if (!request.resource_name().empty()) resource = request.resource_name();
        bytes += request.data();
      }
      if (KeyOf(engine_->Put(bytes)) != KeyOfResource(resource)) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the bytes are not the blob named");
      }
      answer->set_committed_size(static_cast<int64_t>(bytes.size()));
      return grpc::Status::OK;
    }

   private:
    ScriptedEngine* engine_;
  };

  class Execution final : public reapi::Execution::Service {
   public:
    explicit Execution(ScriptedEngine* engine) : engine_(engine) {}
    grpc::Status Execute(grpc::ServerContext*, const reapi::ExecuteRequest* request,
                         grpc::ServerWriter<Operation>* writer) override {
      EngineCall call;
      Script script;
      {
        absl::MutexLock lock(&engine_->mu_);
        auto action = engine_->blobs_.find(KeyOf(request->action_digest()));
        if (action == engine_->blobs_.end() || !call.action.ParseFromString(action->second)) {
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no such Action");
        }
        auto command = engine_->blobs_.find(KeyOf(call.action.command_digest()));
        if (command == engine_->blobs_.end() || !call.command.ParseFromString(command->second)) {
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no such Command");
        }
        for (const auto& property : call.command.platform().properties()) {
          call.platform[property.name()] = property.value();
        }
        engine_->calls_.push_back(call);
        script = engine_->script_;
      }
      Operation operation;
      operation.set_name(absl::StrCat("operations/scripted-", absl::ToUnixNanos(absl::Now())));
      operation.set_done(true);
      operation.mutable_response()->PackFrom(script ? script(call, *engine_)
                                                    : CompiledAnswer(call, *engine_));
      writer->Write(operation);
      return grpc::Status::OK;
    }

   private:
    ScriptedEngine* engine_;
  };

  class ActionCache final : public reapi::ActionCache::Service {
   public:
    explicit ActionCache(ScriptedEngine* engine) : engine_(engine) {}
    grpc::Status GetActionResult(grpc::ServerContext*, const reapi::GetActionResultRequest* request,
                                 reapi::ActionResult* result) override {
      Lookup lookup;
      {
        absl::MutexLock lock(&engine_->mu_);
        engine_->lookups_.push_back(KeyOf(request->action_digest()));
        lookup = engine_->lookup_;
      }
      std::optional<reapi::ActionResult> found =
          lookup ? lookup(request->action_digest()) : std::nullopt;
      if (!found.has_value()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "not cached");
      *result = *std::move(found);
      return grpc::Status::OK;
    }

   private:
    ScriptedEngine* engine_;
  };

  Capabilities capabilities_;
  Store store_;
  ByteStream bytestream_;
  Execution execution_;
  ActionCache action_cache_;
};

std::unique_ptr<ScriptedEngine> ScriptedEngine::Start(
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  std::unique_ptr<ScriptedEngine> engine(new ScriptedEngine());
  engine->services_ = std::make_unique<Services>(engine.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0",
                           credentials ? credentials : grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  engine->services_->RegisterWith(builder);
  engine->server_ = builder.BuildAndStart();
  EXPECT_NE(engine->server_, nullptr);
  EXPECT_NE(port, 0);
  engine->address_ = absl::StrCat("127.0.0.1:", port);
  return engine;
}

ScriptedEngine::~ScriptedEngine() {
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
}

const std::string& EngineObjectBytes() { return EngineObject(); }

void ScriptedEngine::AnswerLookups(Lookup lookup) {
  absl::MutexLock lock(&mu_);
  lookup_ = std::move(lookup);
}

std::vector<std::string> ScriptedEngine::lookups() {
  absl::MutexLock lock(&mu_);
  return lookups_;
}

void ScriptedEngine::Answer(Script script) {
  absl::MutexLock lock(&mu_);
  script_ = std::move(script);
}

reapi::ExecuteResponse ScriptedEngine::CompiledAnswer(const EngineCall& call,
                                                      ScriptedEngine& engine) {
  reapi::ExecuteResponse response;
  response.mutable_result()->set_exit_code(0);
  for (const std::string& path : call.command.output_files()) {
    reapi::OutputFile* file = response.mutable_result()->add_output_files();
    file->set_path(path);
    *file->mutable_digest() = engine.Put(EngineObject());
  }
  return response;
}

std::string WriteEnginePlan(const std::string& root, int units, const std::string& library) {
  std::vector<std::string> values;
  for (int i = 1; i <= units; ++i) values.push_back(absl::StrCat(i));
  EXPECT_TRUE(
      WriteFileAtomically(root + "/src/kern.cuh", "template <typename T, int N> void Kern() {}\n")
          .ok());
  const std::string plan = root + "/src/kernels.toml";
  EXPECT_TRUE(WriteFileAtomically(plan, absl::StrCat("# ", root, R"(
[build]
output = ")",
                                                     library, R"("
flags = ["-O3"]
sources = []

[[instantiations]]
name = "kern"
unit = "kern_{n}"
headers = ["kern.cuh"]
text = "template void Kern<float, {n}>();"

[instantiations.axes]
n = [)",
                                                     absl::StrJoin(values, ", "), "]\n"))
                  .ok());
  return plan;
}

reapi::Digest ScriptedEngine::Put(const std::string& bytes) {
  const Digest digest = DigestOf(bytes);
  reapi::Digest out;
  out.set_hash(digest.hash);
  out.set_size_bytes(digest.size_bytes);
  absl::MutexLock lock(&mu_);
  blobs_[KeyOf(out)] = bytes;
  return out;
}

std::vector<EngineCall> ScriptedEngine::calls() {
  absl::MutexLock lock(&mu_);
  return calls_;
}

void ScriptedEngine::HoldUploadsOf(const std::string& needle) {
  absl::MutexLock lock(&mu_);
  held_needle_ = needle;
}

bool ScriptedEngine::AwaitHeldUpload(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto begun = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ > 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&begun), timeout);
}

bool ScriptedEngine::AwaitHeldUploadsCancelled(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ended = [this]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ > 0 && held_running_ == 0; };
  mu_.AwaitWithTimeout(absl::Condition(&ended), timeout);
  return held_ > 0 && held_running_ == 0 && held_cancelled_ == held_;
}

bool ScriptedEngine::AwaitHeldUploadsRunning(int count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto running = [this, count]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_running_ == count; };
  return mu_.AwaitWithTimeout(absl::Condition(&running), timeout);
}

std::vector<std::string> ScriptedEngine::reads() {
  absl::MutexLock lock(&mu_);
  return reads_;
}

}  // namespace distcc_cuda::testing
