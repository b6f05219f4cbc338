// SPDX-License-Identifier: Apache-2.0
// Another Remote Execution API engine, scripted by a test, on 127.0.0.1:0:
// Capabilities (SHA-256, execution enabled), a content store in memory
// (FindMissingBlobs, the batch calls, ByteStream), an ActionCache that holds
// nothing unless scripted, and an Execution service
// that runs nothing: each Execute reads the Action and its Command from the
// store, as an engine does, and answers what the test's script makes of
// them. What a worker in engine mode (`distcc-cuda build
// --remote-executor`) is tested against, hostile answers included; over
// TLS with the server credentials given (a client certificate required
// where they say so).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "build/bazel/remote/execution/v2/remote_execution.grpc.pb.h"
#include "common/store/digest.h"
#include "google/bytestream/bytestream.grpc.pb.h"

namespace distcc_cuda::testing {

namespace reapi = ::build::bazel::remote::execution::v2;

// One Execute the engine was asked for.
struct EngineCall {
  reapi::Action action;
  reapi::Command command;
  std::map<std::string, std::string> platform;  // the Command's properties
};

class ScriptedEngine {
 public:
  // What Execute answers for a call. The engine stores the blobs the
  // answer's output files name with Put before answering.
  using Script = std::function<reapi::ExecuteResponse(const EngineCall&, ScriptedEngine&)>;

  // Serves on 127.0.0.1:0 with `credentials` (insecure when null).
  static std::unique_ptr<ScriptedEngine> Start(
      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);
  ~ScriptedEngine();

  std::string address() const { return address_; }  // 127.0.0.1:PORT

  // From now on each Execute answers what `script` returns. By default:
  // CompiledAnswer.
  void Answer(Script script);
  // Exit 0 with each output file the Command names, stored here: an object
  // the fake nvcc compiled from "// compiled by the scripted engine" (a
  // relocatable ELF file a link takes).
  static reapi::ExecuteResponse CompiledAnswer(const EngineCall& call, ScriptedEngine& engine);

  // What GetActionResult answers for an Action's digest: an entry, or
  // nullopt for NOT_FOUND (the default, for every digest).
  using Lookup = std::function<std::optional<reapi::ActionResult>(const reapi::Digest&)>;
  void AnswerLookups(Lookup lookup);
  // The digests looked up so far ("HASH/SIZE"), in order.
  std::vector<std::string> lookups();

  // Stores `bytes`; their digest.
  reapi::Digest Put(const std::string& bytes);
  // The Executes so far, in order.
  std::vector<EngineCall> calls();
  // The blobs anybody read whole from the store ("HASH/SIZE"), in order.
  std::vector<std::string> reads();

  // From now on a batch upload with a blob that holds `needle` is held (its
  // call does not answer) until its caller cancels it, or 60 s pass.
  void HoldUploadsOf(const std::string& needle);
  // Waits up to `timeout` for a held upload to begin; whether one did.
  bool AwaitHeldUpload(absl::Duration timeout);
  // Waits up to `timeout` for the held uploads to end; whether they all
  // ended because their callers cancelled them.
  bool AwaitHeldUploadsCancelled(absl::Duration timeout);
  // Waits up to `timeout` until `count` held uploads are still held; whether
  // they are.
  bool AwaitHeldUploadsRunning(int count, absl::Duration timeout);

 private:
  class Services;
  ScriptedEngine() = default;

  std::string address_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;

  absl::Mutex mu_;
  std::map<std::string, std::string> blobs_ ABSL_GUARDED_BY(mu_);  // "HASH/SIZE" -> bytes
  Script script_ ABSL_GUARDED_BY(mu_);
  Lookup lookup_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> lookups_ ABSL_GUARDED_BY(mu_);
  std::vector<EngineCall> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> reads_ ABSL_GUARDED_BY(mu_);
  std::string held_needle_ ABSL_GUARDED_BY(mu_);
  int held_ ABSL_GUARDED_BY(mu_) = 0;            // held uploads begun
  int held_running_ ABSL_GUARDED_BY(mu_) = 0;    // and not ended
  int held_cancelled_ ABSL_GUARDED_BY(mu_) = 0;  // ended by their callers
};

// The object the engine's compiles return (CompiledAnswer's).
const std::string& EngineObjectBytes();

// Writes ROOT/src/kernels.toml, a manifest of `units` instantiations of one
// tiny kernel (kern_1, kern_2...; no sources) linked as `library`, and its
// header, with ROOT in a comment so that no other test's build shares its
// results; returns the manifest's path. What the engine tests build.
std::string WriteEnginePlan(const std::string& root, int units, const std::string& library);

}  // namespace distcc_cuda::testing
