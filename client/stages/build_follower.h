// SPDX-License-Identifier: Apache-2.0
// A submitted build followed to its end: its event stream read, each unit
// that finishes printed, traced and its objects downloaded beside the plan,
// and the build submitted again when its coordinator goes away and comes
// back (its result cache gives back what had finished). `build PLAN`'s
// stage between the submission and the link.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/plan/build_plan.h"
#include "client/scan/scan_cache.h"
#include "client/stages/build_submission.h"
#include "client/stages/verify.h"
#include "client/text/trace.h"
#include "common/base/cancellation.h"
#include "common/store/cas_client.h"
#include "distcc_cuda/v1/build.grpc.pb.h"

namespace distcc_cuda::client {

// One unit as it came back, for the summary.
struct UnitReport {
  std::string name;
  std::string worker;
  bool cached = false;
  bool ok = false;
  int64_t wall_ms = 0;
  int64_t cpu_ms = 0;
  int64_t peak_bytes = 0;
  int64_t predicted_bytes = 0;
  std::string prediction_source;
};

// The downloaded objects of a unit compiled one target per unit.
struct PartObjects {
  int count = 0;                     // targets of the whole unit
  std::map<int, std::string> paths;  // by target index
};

// What following a build gave: its units as they came back and how its
// stream ended.
struct FollowedBuild {
  int total = 0;                // units the coordinator has named, splits counted
  bool finished = false;        // the coordinator said the build ended
  bool last_part_seen = false;  // the coordinator had every unit
  std::vector<UnitReport> reports;
  std::vector<std::string> failed;  // units that did not compile
  std::set<std::string> started;    // began on a worker and not finished
  // Came back, but their objects could not be downloaded because the
  // coordinator went away, and it did not give them again.
  std::set<std::string> not_downloaded;
  // Units compiled as one unit per -gencode target: their parts' objects,
  // merged into the unit's object before the link.
  std::map<std::string, PartObjects> architecture_parts;
  std::vector<UnitToVerify> returned;                // every unit here, for --verify
  std::map<std::string, std::string> local_objects;  // unit name -> path here
  absl::Status download_error;                       // the first object that cannot be linked
  // After a lost coordinator: how often the build was submitted again, and
  // what became of the units that had already come back.
  int resubmissions = 0;
  int came_back_cached = 0;
  int compiled_again = 0;
  grpc::Status status;  // how the last stream ended
};

class BuildFollower {
 public:
  struct Settings {
    const LocalPlan* plan = nullptr;    // not owned
    std::string toolchain_digest;       // objects of another toolchain are refused
    std::string toolchain_description;  // DescribeToolchain, for that message
    std::string address;                // the coordinator's, for messages
    // Wait up to this for a coordinator that went away; zero: give up.
    absl::Duration reconnect_timeout;
    const CancelToken* cancel = nullptr;  // may be null
    absl::Time start;                     // when the build command began
  };
  BuildFollower(Settings settings, std::shared_ptr<grpc::Channel> channel, BuildTrace& trace,
                std::ostream& out);

  // Ends the current stream (a cancel, a failed scan or part); the
  // coordinator, seeing its client go, stops the build's units.
  void EndStream();
  // The submission failed: ends the stream, and no other is opened.
  void SubmissionFailed();

  // Opens the build with `request`, hands it to `submission` (which sends
  // its units in parts), follows its events to the end, and submits it
  // again after a lost coordinator that comes back. UNAVAILABLE when it did
  // not come back within the reconnect timeout; otherwise OK, and result()
  // says how it ended.
  absl::Status Follow(const v1::SubmitBuildRequest& request, BuildSubmission& submission,
                      const ScanCache& scan_cache);

  const FollowedBuild& result() const { return result_; }

 private:
  bool cancelled() const;
  void OnEvent(const v1::BuildEvent& event, BuildSubmission& submission,
               const ScanCache& scan_cache);
  void OnAccepted(const v1::BuildEvent::Accepted& accepted, BuildSubmission& submission);
  void OnUnitFinished(const v1::BuildEvent::UnitFinished& done, const BuildSubmission& submission);
  // `result`'s messages, naming this machine's files
  // (BuildSubmission::ToLocalText in the folder unit `unit` compiled in).
  std::string MessagesOf(const std::string& unit, const v1::TaskResult& result,
                         const BuildSubmission& submission);
  void TraceUnit(const v1::BuildEvent::UnitFinished& done, absl::Time finished_at);
  void PrintUnitLine(const v1::BuildEvent::UnitFinished& done, const UnitReport& report,
                     bool all_sent);
  // Downloads `done`'s outputs; false when the coordinator went away
  // mid-download (the unit comes again after the resubmission).
  bool DownloadObjects(const v1::BuildEvent::UnitFinished& done, absl::Time finished_at);
  // Whether the stream that just ended was a lost coordinator to wait for.
  bool ShouldReconnect() const;
  // Waits for the coordinator to answer again; false after the timeout.
  bool WaitForCoordinator(absl::Time lost_at);

  const Settings settings_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::BuildService::Stub> stub_;
  CasClient cas_;
  BuildTrace& trace_;
  std::ostream& out_;
  FollowedBuild result_;
  std::set<std::string> have_;  // units whose result is here (in result_.reports)
  std::map<std::string, std::string> directories_;  // the plan's units' folders, once one speaks
  std::map<std::string, absl::Time> started_at_;    // for --trace
  std::map<std::string, absl::Time> queued_at_;     // for --trace
  absl::Time submitted_at_;
  bool opened_ = false;

  absl::Mutex stream_mu_;
  grpc::ClientContext* stream_context_ ABSL_GUARDED_BY(stream_mu_) = nullptr;
  std::atomic<bool> submission_failed_{false};
};

}  // namespace distcc_cuda::client
