// SPDX-License-Identifier: Apache-2.0
// A worker as a bot of another Remote Execution API engine (BuildGrid), over
// the Remote Workers API: it opens a bot session that advertises its
// platform and capacity, takes the leases the engine assigns (each an
// Action), runs each on a thread of its own through the worker, and reports
// each lease's ActionResult or status in its next update. It never spins:
// with room for a lease, the engine may hold the update until work comes
// (a lease that ends meanwhile cuts it short, to be reported at once);
// full, it updates when a lease ends or every few seconds to stay alive;
// an update that changed nothing is followed by the next a second later
// at the soonest. Stopping reports the
// leases still running as UNAVAILABLE (the engine gives them to another
// bot) and the session as BOT_TERMINATING.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "build/bazel/remote/execution/v2/remote_execution.pb.h"
#include "common/base/cancellation.h"
#include "google/devtools/remoteworkers/v1test2/bots.grpc.pb.h"
#include "grpcpp/channel.h"

namespace distcc_cuda::worker {

namespace rwapi = ::google::devtools::remoteworkers::v1test2;
namespace reapi = ::build::bazel::remote::execution::v2;

struct BotOptions {
  std::string engine_address;  // for messages
  std::string instance;        // the engine's instance: the session's parent
  // The same across restarts, so that the engine gives a restarted bot's
  // leases to another at once (the worker's --name; default its host name).
  std::string bot_id;
  int capacity = 1;  // leases at once (the worker's slots)
  // What the bot's primary device advertises (OSFamily, ISA, toolchain, memory).
  std::vector<std::pair<std::string, std::string>> properties;
  // Told of each call to the engine ("create", "update") and how it ended.
  std::function<void(absl::string_view call, const absl::Status& status)> on_call;
};

// How one lease ended: OK with the Action's result, or a status that says
// why it has none (INVALID_ARGUMENT: refused; UNAVAILABLE, INTERNAL: the
// engine gives it to a bot again).
struct LeaseOutcome {
  absl::Status status;
  reapi::ActionResult result;
};
using LeaseRunner = std::function<LeaseOutcome(
    const reapi::Action& action, const std::string& lease_id, const CancelToken& cancel)>;

class BotSession {
 public:
  // Starts the session's thread; it creates the session (retrying with
  // backoff while the engine is away) and then serves leases with `run`.
  static std::unique_ptr<BotSession> Start(std::shared_ptr<grpc::Channel> channel,
                                           BotOptions options, LeaseRunner run);
  // Stops taking work and ends the leases that run (they are reported
  // UNAVAILABLE, for the engine to give to another bot); the destructor
  // then reports them and says BOT_TERMINATING.
  void Stop();
  ~BotSession();

  // The session's name once the engine created it; "" until then.
  std::string name() const;
  // Leases running now.
  int running() const;

 private:
  struct RunningLease {
    rwapi::Lease lease;  // as reported next: ACTIVE, or COMPLETED with its outcome
    std::shared_ptr<CancelToken> cancel;
    std::thread thread;
  };
  BotSession() = default;
  void Loop();
  // Creates the session, with backoff, until it is created or the bot
  // stops. False when stopped.
  bool CreateUntilStopped();
  // What the next update says: the bot, its leases as they stand.
  rwapi::BotSession Snapshot(rwapi::BotStatus status) const;
  // One UpdateBotSession call of at most `deadline`.
  absl::StatusOr<rwapi::BotSession> Update(const rwapi::BotSession& session,
                                           absl::Duration deadline);
  // Takes what the engine answered: forgets the leases it was told of as
  // completed, starts the new ones, cancels those it cancelled or dropped.
  // True when anything changed (a lease started, ended or was cancelled).
  bool Reconcile(const rwapi::BotSession& sent, const rwapi::BotSession& answer);
  void StartLease(const rwapi::Lease& lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunLease(std::string id, rwapi::Lease lease, std::shared_ptr<CancelToken> cancel);
  // Leases running now.
  int Running() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Slots in use: running leases, and cancelled ones until their run ends.
  int Occupied() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives `lease` back in the next update (UNAVAILABLE, saying `why`).
  void Decline(const rwapi::Lease& lease, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SomeLeaseEnded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LeaseEnded() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits `delay` unless the bot stops first.
  void Pause(absl::Duration delay);

  BotOptions options_;
  LeaseRunner run_;
  std::unique_ptr<rwapi::Bots::Stub> stub_;
  absl::Notification stop_;
  std::thread loop_;
  mutable absl::Mutex mu_;
  rwapi::BotSession session_ ABSL_GUARDED_BY(mu_);                   // name, bot id, worker
  std::map<std::string, RunningLease> leases_ ABSL_GUARDED_BY(mu_);  // by lease id
  // Threads of leases that ended and were reported, joined by the loop.
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace distcc_cuda::worker
