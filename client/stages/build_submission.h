// SPDX-License-Identifier: Apache-2.0
// A plan's build submitted in parts as its units are scanned, so that its
// scans overlap its compiles: the first unit compiles after the first scan,
// not the last. The units and sets of the plan are scanned on every usable
// core; whatever has been scanned when the part before has gone is the next
// part (AddUnits to the build opened with more_units_follow), its inputs
// uploaded first. A part is as large as the scans that finished meanwhile,
// so a rebuild whose scans all come from the scan cache goes in a few parts.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/plan/build_plan.h"
#include "client/plan/unit_request.h"
#include "client/plan/workspace_layout.h"
#include "client/scan/scan_cache.h"
#include "common/base/machine_slots.h"
#include "common/store/cas_client.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::client {

struct SubmissionSettings {
  std::string nvcc;                 // scans with it
  ScanCache* scan_cache = nullptr;  // may be null; not owned
  int scan_slots = 1;               // scans at once
  // The embedded default's slots of this machine (not owned; may be null):
  // each scan holds one, beside the embedded worker's compiles.
  MachineSlots* machine_slots = nullptr;
  // A part that cannot go because the coordinator went away waits for
  // Reopen (the caller reconnects) instead of failing the submission;
  // `on_lost` is called then (the caller ends its build stream, if the
  // coordinator's going has not ended it yet).
  bool wait_for_reopen = false;
  std::function<void()> on_lost;
  std::string address;  // the coordinator's, for messages
  // --absolute-paths: every file at its own path on the workers
  // (WorkspaceLayout::AsIs), not the workspace at the canonical root.
  bool absolute_paths = false;
};

// The request that opens a plan's build: its name, toolchain and split,
// more_units_follow, no units.
v1::SubmitBuildRequest OpeningRequest(const std::string& build_name,
                                      const v1::ToolchainFingerprint& toolchain,
                                      v1::ArchitectureSplit split);

// The error for a coordinator that does not take builds in parts.
absl::Status OlderCoordinatorError(const std::string& address);

class BuildSubmission {
 public:
  // Starts scanning the units and sets of `plan`, which must outlive this
  // (their closures are filled in). `on_error` is called once, from a
  // scanning or sending thread, with the first error: the caller ends its
  // build stream then.
  BuildSubmission(LocalPlan& plan, SubmissionSettings settings,
                  std::shared_ptr<grpc::Channel> channel,
                  std::function<void(const absl::Status&)> on_error);
  // Stops and joins (Finish).
  ~BuildSubmission();
  BuildSubmission(const BuildSubmission&) = delete;
  BuildSubmission& operator=(const BuildSubmission&) = delete;

  // Sends the scanned units, part by part, to the open build `build_id`:
  // one thread makes the parts and uploads their inputs while another adds
  // the part before, which the coordinator plans meanwhile.
  void SendTo(const std::string& build_id);
  // The coordinator was lost and the build opened again as `build_id`:
  // every part sent before is sent again (with the inputs the coordinator
  // lacks), then the rest as they are scanned.
  void Reopen(const std::string& build_id);
  // Whether the last part went: the coordinator has the whole build.
  bool closed() const;
  // Stops scanning and sending, joins, and returns the first error of a
  // scan, a check, an upload or a part (OK after a Stop by the caller).
  absl::Status Finish();

  // What the submission did, for the summary and the trace: final once the
  // last part went (closed()).
  struct Figures {
    int units = 0;                          // units and sets scanned
    int scans_cached = 0;                   // answered by the scan cache
    int input_files = 0;                    // distinct input files
    int uploaded = 0;                       // of them, uploaded (the coordinator lacked them)
    std::vector<std::string> roots;         // workspace roots, most units' first
    std::map<std::string, int> workspaces;  // units and sets by workspace root
    // What units read outside their workspace, at its own path (the most
    // files one unit read under each folder).
    OutsideFiles outside;
    InputRoots input_roots;  // the units' input roots, by their folder here
    absl::Time scan_began = absl::InfinitePast();
    absl::Time scan_ended = absl::InfinitePast();
    struct Part {
      absl::Time began, sent;  // inputs made and uploaded, then added
      int units = 0;           // units and sets in it
    };
    std::vector<Part> parts;
  };
  Figures figures() const;

  // `text` (a unit's messages from its worker; the unit compiled in
  // `directory` here, "" for a set's) with each canonical root named as it
  // is here: the workspace of most units, every input root, and the
  // workspace as a unit in an out-of-tree build folder names its source
  // (WorkspaceLayout::ToLocalText). As it is with --absolute-paths.
  std::string ToLocalText(absl::string_view text, const std::string& directory) const;

 private:
  // One scan job: a unit (index < plan.units.size()) or a set.
  absl::Status Scan(size_t job);
  void ScanLoop();
  // Makes parts of what was scanned and uploads their inputs, while the
  // part before is planned by the coordinator (AddLoop adds them).
  void MakeLoop();
  // Makes the part(s) of `jobs` (one per workspace root), uploads what the
  // coordinator lacks and queues them for AddLoop; `last` marks the last.
  // The first part carries `scan_micros`, the scans' times, for metrics.
  absl::Status MakePart(const std::vector<size_t>& jobs, bool last,
                        const std::vector<int64_t>& scan_micros);
  // Adds the parts made, in order, to the build; after a Reopen, all again.
  void AddLoop();
  // Uploads every input made so far (a reopened build's coordinator may
  // have lost its store).
  absl::Status UploadAll();
  absl::Status Add(const v1::AddUnitsRequest& part, const BlobSource* plan_blob);
  void Fail(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // The layout of scanned job `job` (a unit, or a set after the units):
  // the plan's workspace, widened over what its closure reaches by "../"
  // (LayoutFor). The same for a unit however its build was cut into parts,
  // so a rebuild keys it the same.
  absl::StatusOr<WorkspaceLayout> LayoutOf(size_t job, OutsideFiles* outside)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(files_mu_);

  // The files of the units under one workspace root, and how many of its
  // blobs and folders went up already.
  struct RootFiles {
    WorkspaceFiles files;
    size_t blobs_sent = 0;
    size_t folders_sent = 0;
    int units = 0;
    OutsideFiles outside;    // as Figures::outside, for these units
    InputRoots input_roots;  // as Figures::input_roots, for these units
  };
  struct MadePart {
    v1::AddUnitsRequest request;  // without its build id
    std::optional<BlobSource> plan_blob;
  };

  LocalPlan& plan_;
  const SubmissionSettings settings_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::BuildService::Stub> stub_;
  CasClient cas_;
  const std::function<void(const absl::Status&)> on_error_;
  std::vector<std::string> excluded_;         // the toolkit's own folders
  ToolkitPlaces toolkit_;                     // its roots, and which relocate
  std::vector<std::string> system_prefixes_;  // and the system's

  mutable absl::Mutex mu_;
  std::vector<size_t> ready_ ABSL_GUARDED_BY(mu_);  // scanned, not in a part yet
  // How long the scans of ready_ took (µs), for the coordinator's metrics.
  std::vector<int64_t> scan_micros_ ABSL_GUARDED_BY(mu_);
  size_t next_job_ ABSL_GUARDED_BY(mu_) = 0;
  size_t scanned_ ABSL_GUARDED_BY(mu_) = 0;
  std::string build_id_ ABSL_GUARDED_BY(mu_);
  std::string reopened_as_ ABSL_GUARDED_BY(mu_);  // set by Reopen until the sender takes it
  bool lost_ ABSL_GUARDED_BY(mu_) = false;        // a part found the coordinator gone
  bool last_made_ ABSL_GUARDED_BY(mu_) = false;   // the last part is in parts_
  bool closed_ ABSL_GUARDED_BY(mu_) = false;      // ... and was added
  // Every part made, in order, and how many the build has now.
  std::vector<std::shared_ptr<const MadePart>> parts_ ABSL_GUARDED_BY(mu_);
  size_t added_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  Figures figures_ ABSL_GUARDED_BY(mu_);
  // The inputs made so far, by workspace root: MakePart's, and UploadAll's
  // after a Reopen.
  absl::Mutex files_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::map<std::string, RootFiles> roots_ ABSL_GUARDED_BY(files_mu_);
  // NamedInputPaths by folder and flags: a CUTLASS build's 55,000 units
  // share a few sets of flags.
  std::map<std::pair<std::string, std::vector<std::string>>, std::vector<std::string>> anchors_
      ABSL_GUARDED_BY(files_mu_);

  std::vector<std::thread> scanners_;
  std::thread maker_;
  std::thread adder_;
};

}  // namespace distcc_cuda::client
