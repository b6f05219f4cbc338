// SPDX-License-Identifier: Apache-2.0
// One launcher call compiled on the cluster: scan its includes here (writing
// the dependency file the call asked for), upload what the coordinator's
// store lacks, submit it as a build of one unit, wait, and write the object
// where the call's -o says.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/launcher/launcher_call.h"
#include "client/plan/workspace_layout.h"
#include "client/scan/scan_cache.h"
#include "client/scan/scan_cohort.h"
#include "common/base/cancellation.h"
#include "common/base/machine_slots.h"
#include "distcc_cuda/v1/build.pb.h"
#include "distcc_cuda/v1/launcher.pb.h"

namespace distcc_cuda::client {

// What nvcc did on the worker, and how it went.
struct RemoteCompileResult {
  int exit_code = 0;
  std::string stdout_text;
  std::string stderr_text;
  std::string worker;
  bool cached = false;  // from the result cache: nothing compiled
  int64_t wall_ms = 0;
  int64_t peak_bytes = 0;
  int64_t predicted_bytes = 0;
  std::string prediction_source;  // what the coordinator predicted it from
  std::string toolchain;          // DescribeToolchain of the nvcc it compiled with
  bool scan_cached = false;       // its includes came from the scan cache: no nvcc -M ran
  std::string workspace;          // the folder the workers saw at the canonical root
  OutsideFiles outside;           // what it read outside that, at its own path
  InputRoots input_roots;         // where else the workers saw what it read
  // When each step ended, for --trace: the call came, its includes were
  // scanned, its inputs uploaded, a worker started it (InfinitePast when it
  // came from the cache), it finished, its object was written here.
  absl::Time asked = absl::InfinitePast();
  absl::Time scanned = absl::InfinitePast();
  absl::Time uploaded = absl::InfinitePast();
  absl::Time started = absl::InfinitePast();
  absl::Time finished = absl::InfinitePast();
  absl::Time downloaded = absl::InfinitePast();
};

// Where a call's workspace is found and how it is laid out on the workers.
struct LayoutSettings {
  // --absolute-paths: every file at its own path (WorkspaceLayout::AsIs).
  bool absolute_paths = false;
  // A `build --` session's folder: the search for a call's project does not
  // climb above it (FindProjectRoot's bound). "": no session.
  std::string session_folder;
};

class RemoteCompiler {
 public:
  // `address` only names the coordinator in messages. At most `scan_slots`
  // dependency passes (nvcc -M) run here at once, however many calls wait.
  // Scans are answered from the scan cache in `scan_cache_folder` where
  // nothing changed ("": no scan cache), in an environment that sets
  // `nvcc_variables` (ScanCache's). Each nvcc's toolchain is fingerprinted
  // once, its files' hashes kept in `state_dir` ("": hashed).
  RemoteCompiler(std::shared_ptr<grpc::Channel> channel, std::string address, int scan_slots,
                 std::string scan_cache_folder, EnvironmentVariables nvcc_variables,
                 std::string state_dir = "");

  // On the embedded default: each scan also holds one of this machine's
  // slots, which its worker's compiles share. Call before the first Compile.
  void ShareMachineSlots(std::shared_ptr<MachineSlots> slots) { machine_slots_ = std::move(slots); }
  // How calls' workspaces are laid out. Call before the first Compile.
  void SetLayoutSettings(LayoutSettings settings) { layout_settings_ = std::move(settings); }

  // Compiles `call` (planned by DecideWhereToCompile) on the cluster. Returns
  // nvcc's exit code and output; on exit code 0 the object is at the call's
  // -o. INVALID_ARGUMENT when the compile should run here instead (a check
  // refuses it, or the include scan fails: the real nvcc then says why);
  // UNAVAILABLE when the coordinator cannot be reached; FAILED_PRECONDITION
  // when no worker has this toolchain; ABORTED when the cluster could not
  // run it (killed for memory on every attempt, a worker's error), with the
  // reason; CANCELLED once `cancel` (may be null) is cancelled.
  absl::StatusOr<RemoteCompileResult> Compile(const LauncherCall& call,
                                              const RemoteCompilePlan& plan,
                                              const CancelToken* cancel);

 private:
  absl::StatusOr<v1::ToolchainFingerprint> ToolchainOf(const std::string& nvcc);
  // The files `call` reads, from nvcc's dependency pass (or the scan
  // cache), at most scan_slots at once; writes the dependency file the call
  // asked for; `scan_time` is how long that took once a slot was free.
  // `workspace` keys the scan cache's entries (ScanQuestion). INVALID_ARGUMENT
  // when nvcc names none.
  absl::StatusOr<std::vector<std::string>> ScanClosure(const LauncherCall& call,
                                                       const RemoteCompilePlan& plan,
                                                       const std::vector<std::string>& excluded,
                                                       const std::string& workspace,
                                                       ScanCache& scan_cache,
                                                       absl::Duration& scan_time);
  // OK when the host compiler `compiler` is the one `toolchain` names (the
  // same `--version`, asked once per compiler); INVALID_ARGUMENT, saying
  // which it is, otherwise: its compiles then run here.
  absl::Status CheckHostCompiler(const std::string& compiler,
                                 const v1::ToolchainFingerprint& toolchain);
  // Whether a connected worker has `toolchain`, from the coordinator's
  // status: a yes is kept for the session, a no (or no answer) asked again.
  bool ToolchainServed(const v1::ToolchainFingerprint& toolchain);
  // UNAVAILABLE for a coordinator that cannot be reached (`what` says how).
  absl::Status Unreachable(const std::string& what) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::string address_;
  absl::Mutex mu_;
  std::map<std::string, v1::ToolchainFingerprint> toolchains_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> host_versions_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> served_toolchains_ ABSL_GUARDED_BY(mu_);  // their digests
  int scans_free_ ABSL_GUARDED_BY(mu_);
  const std::string scan_cache_folder_;
  const EnvironmentVariables nvcc_variables_;
  const std::string state_dir_;
  std::shared_ptr<MachineSlots> machine_slots_;  // may be null
  LayoutSettings layout_settings_;
  // The calls started together reach the coordinator together.
  ScanCohort cohort_;
};

// A launcher call's answer, and the remote result when it compiled there.
struct LauncherOutcome {
  v1::LauncherCompileReply reply;
  std::optional<RemoteCompileResult> remote;
  std::string cluster_error;  // why the cluster could not compile it, if so
};

// Runs `decision`: a local one becomes a reply that says so; a remote one
// compiles on `compiler`. A compile refused before anything left (or whose
// scan failed) runs here; a cluster that fails is an error for the caller
// (exit code 2, the reason on stderr) unless `fallback_local`. A compile
// that failed on its worker for a missing file (MissingFileNamedIn) runs
// here too: the scan here found every file, so what was shipped fell short.
LauncherOutcome CompileOrRunHere(RemoteCompiler& compiler, const LauncherCall& call,
                                 const LauncherDecision& decision, const CancelToken* cancel,
                                 bool fallback_local);

// The file of a compiler's "fatal error: NAME: No such file or directory"
// line in `compiler_errors` (GCC's and nvcc's form); "" when none.
std::string MissingFileNamedIn(absl::string_view compiler_errors);

}  // namespace distcc_cuda::client
