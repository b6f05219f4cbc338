// SPDX-License-Identifier: Apache-2.0
#include "worker/bot_session.h"

#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::worker {
namespace {

// With room for a lease, the engine may hold an update until work comes
// (BuildGrid: 0.8 of the deadline, when the session's version is
// unchanged); full, the bot says it is alive this often.
constexpr absl::Duration kWaitForWorkDeadline = absl::Seconds(30);
constexpr absl::Duration kFullUpdateEvery = absl::Seconds(10);
constexpr absl::Duration kFullUpdateDeadline = absl::Seconds(20);
// The least time between two updates that changed nothing, whatever the
// engine does: a bot never spins.
constexpr absl::Duration kMinQuietInterval = absl::Seconds(1);
constexpr absl::Duration kMaxBackoff = absl::Seconds(30);
// Short enough that the engine opens the session at once rather than hold
// it for work (BuildGrid assigns none under a 3.75 s deadline): the bot says
// it joined, and its first update waits for work.
constexpr absl::Duration kCreateDeadline = absl::Seconds(3);

std::chrono::system_clock::time_point SessionDeadlineIn(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

// `status` as the lease's google.rpc.Status, with its details (a
// PreconditionFailure naming missing blobs, which the client uploads).
void SetLeaseStatus(const absl::Status& status, rwapi::Lease& lease) {
  grpc::Status wire = ToGrpcStatus(status);
  if (wire.error_details().empty() ||
      !lease.mutable_status()->ParseFromString(wire.error_details())) {
    lease.mutable_status()->set_code(static_cast<int>(status.code()));
    lease.mutable_status()->set_message(std::string(status.message()));
  }
}

// What a person should check when an engine refuses to open a session.
std::string WhatToCheck(const absl::Status& why) {
  switch (why.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
      return " (is --instance one of the engine's instances?)";
    case absl::StatusCode::kUnimplemented:
      return " (does the engine serve the Bots API? BuildGrid: its execution service)";
    case absl::StatusCode::kUnavailable:
      return " (is the engine running there?)";
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return " (does it need TLS or a certificate? grpcs://, --tls-*)";
    default:
      return "";
  }
}

// Whether an update's error means the engine no longer has the session:
// BuildGrid says INVALID_ARGUMENT ("Bot does not exist") once it reaped
// it, DATA_LOSS when it closed it; others NOT_FOUND.
bool SessionGone(const absl::Status& status) {
  return absl::IsNotFound(status) || absl::IsInvalidArgument(status) || absl::IsDataLoss(status);
}

}  // namespace

std::unique_ptr<BotSession> BotSession::Start(std::shared_ptr<grpc::Channel> channel,
                                              BotOptions options, LeaseRunner run) {
  std::unique_ptr<BotSession> bot(new BotSession());
  bot->stub_ = rwapi::Bots::NewStub(channel);
  bot->run_ = std::move(run);
  {
    absl::MutexLock lock(&bot->mu_);
    bot->session_.set_bot_id(options.bot_id);
    rwapi::Worker* worker = bot->session_.mutable_worker();
    rwapi::Worker::Config* capacity = worker->add_configs();
    capacity->set_key("capacity");
    capacity->set_value(absl::StrCat(options.capacity));
    // The engine matches an Action's platform against the primary device.
    rwapi::Device* device = worker->add_devices();
    device->set_handle(options.bot_id);
    for (const auto& [key, value] : options.properties) {
      rwapi::Device::Property* property = device->add_properties();
      property->set_key(key);
      property->set_value(value);
    }
  }
  bot->options_ = std::move(options);
  BotSession* self = bot.get();
  bot->loop_ = std::thread([self] { self->Loop(); });
  return bot;
}

void BotSession::Stop() {
  absl::MutexLock lock(&mu_);
  // Once: the loop's last update, which says the bot goes, must not be cut.
  if (stop_.HasBeenNotified()) return;
  stop_.Notify();
  if (in_flight_ != nullptr) in_flight_->TryCancel();
  for (auto& [id, running] : leases_) running.cancel->Cancel("the worker is stopping");
}

BotSession::~BotSession() {
  Stop();
  loop_.join();
}

std::string BotSession::name() const {
  absl::MutexLock lock(&mu_);
  return session_.name();
}

int BotSession::running() const {
  absl::MutexLock lock(&mu_);
  return Running();
}

void BotSession::Pause(absl::Duration delay) { stop_.WaitForNotificationWithTimeout(delay); }

int BotSession::Occupied() const {
  int busy = 0;
  for (const auto& [id, running] : leases_) {
    // A cancelled lease keeps its slot until its run has ended.
    busy += running.lease.state() == rwapi::ACTIVE || running.lease.state() == rwapi::CANCELLED;
  }
  return busy;
}

int BotSession::Running() const {
  int running_leases = 0;
  for (const auto& [id, running] : leases_) {
    running_leases += running.lease.state() == rwapi::ACTIVE ? 1 : 0;
  }
  return running_leases;
}

bool BotSession::LeaseEnded() const {
  absl::MutexLock lock(&mu_);
  return SomeLeaseEnded();
}

bool BotSession::SomeLeaseEnded() const {
  for (const auto& [id, running] : leases_) {
    if (running.lease.state() == rwapi::COMPLETED) return true;
  }
  return false;
}

rwapi::BotSession BotSession::Snapshot(rwapi::BotStatus status) const {
  absl::MutexLock lock(&mu_);
  rwapi::BotSession out = session_;
  out.set_status(status);
  for (const auto& [id, running] : leases_) {
    if (running.lease.state() != rwapi::CANCELLED) *out.add_leases() = running.lease;
  }
  return out;
}

absl::StatusOr<rwapi::BotSession> BotSession::Update(const rwapi::BotSession& session,
                                                     absl::Duration deadline) {
  grpc::ClientContext context;
  context.set_deadline(SessionDeadlineIn(deadline));
  rwapi::BotSession answer;
  grpc::Status status;
  const bool last = session.status() == rwapi::BOT_TERMINATING;
  {
    absl::MutexLock lock(&mu_);
    if (stop_.HasBeenNotified() && !last) return absl::CancelledError("the bot is stopping");
    if (!last) in_flight_ = &context;
  }
  if (session.name().empty()) {
    rwapi::CreateBotSessionRequest request;
    request.set_parent(options_.instance);
    *request.mutable_bot_session() = session;
    status = stub_->CreateBotSession(&context, request, &answer);
  } else {
    rwapi::UpdateBotSessionRequest request;
    request.set_name(session.name());
    *request.mutable_bot_session() = session;
    status = stub_->UpdateBotSession(&context, request, &answer);
  }
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = nullptr;
  }
  if (options_.on_call)
    options_.on_call(session.name().empty() ? "create" : "update", FromGrpcStatus(status));
  RETURN_IF_ERROR(FromGrpcStatus(status));
  return answer;
}

bool BotSession::CreateUntilStopped() {
  absl::Duration backoff = absl::Seconds(1);
  while (!stop_.HasBeenNotified()) {
    rwapi::BotSession sent = Snapshot(rwapi::OK);
    sent.clear_name();
    sent.clear_leases();
    absl::StatusOr<rwapi::BotSession> answer = Update(sent, kCreateDeadline);
    if (answer.ok() && !answer->name().empty()) {
      {
        absl::MutexLock lock(&mu_);
        session_.set_name(answer->name());
      }
      spdlog::info("bot {} joined {} (instance '{}') as session {}, {} leases at once",
                   options_.bot_id, options_.engine_address, options_.instance, answer->name(),
                   options_.capacity);
      Reconcile(sent, *answer);
      return true;
    }
    if (stop_.HasBeenNotified()) break;
    absl::Status why =
        answer.ok() ? absl::InternalError("the engine named no session") : answer.status();
    spdlog::warn("bot {} cannot open a session on {} (instance '{}'): {}{}; trying again in {}",
                 options_.bot_id, options_.engine_address, options_.instance, why.ToString(),
                 WhatToCheck(why), absl::FormatDuration(backoff));
    Pause(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  return false;
}

void BotSession::StartLease(const rwapi::Lease& lease) {
  RunningLease& running = leases_[lease.id()];
  running.lease = lease;
  running.lease.set_state(rwapi::ACTIVE);
  running.cancel = std::make_shared<CancelToken>();
  running.thread = std::thread(
      [this, id = lease.id(), lease, cancel = running.cancel] { RunLease(id, lease, cancel); });
}

void BotSession::RunLease(std::string id, rwapi::Lease lease, std::shared_ptr<CancelToken> cancel) {
  LeaseOutcome outcome;
  reapi::Action action;
  if (!lease.payload().UnpackTo(&action)) {
    outcome.status = absl::InvalidArgumentError(
        absl::StrCat("the lease's payload is a ", lease.payload().type_url(),
                     ", not a build.bazel.remote.execution.v2.Action"));
  } else {
    outcome = run_(action, id, *cancel);
  }
  if (stop_.HasBeenNotified() && !outcome.status.ok()) {
    outcome.status = absl::UnavailableError(absl::StrCat(
        "bot ", options_.bot_id, " is stopping; the engine gives the action to another bot"));
  }
  absl::MutexLock lock(&mu_);
  auto found = leases_.find(id);
  if (found == leases_.end()) return;
  RunningLease& running = found->second;
  if (running.lease.state() == rwapi::CANCELLED) {
    finished_.push_back(std::move(running.thread));
    leases_.erase(found);
    return;
  }
  running.lease.set_state(rwapi::COMPLETED);
  SetLeaseStatus(outcome.status, running.lease);
  if (outcome.status.ok()) running.lease.mutable_result()->PackFrom(outcome.result);
  // An update the engine holds for work would keep this result from it:
  // ended, so that the loop reports the result at once.
  if (in_flight_ != nullptr && !stop_.HasBeenNotified()) in_flight_->TryCancel();
}

void BotSession::Decline(const rwapi::Lease& lease, const std::string& why) {
  RunningLease& declined = leases_[lease.id()];
  declined.lease = lease;
  declined.lease.set_state(rwapi::COMPLETED);
  SetLeaseStatus(absl::UnavailableError(why), declined.lease);
  declined.cancel = std::make_shared<CancelToken>();
}

bool BotSession::Reconcile(const rwapi::BotSession& sent, const rwapi::BotSession& answer) {
  std::set<std::string> reported;     // told the engine they ended
  std::set<std::string> sent_active;  // told the engine they run
  for (const rwapi::Lease& lease : sent.leases()) {
    if (lease.state() == rwapi::COMPLETED) reported.insert(lease.id());
    if (lease.state() == rwapi::ACTIVE) sent_active.insert(lease.id());
  }
  std::set<std::string> listed;
  int started = 0, cancelled = 0, declined = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : reported) {
      auto found = leases_.find(id);
      if (found == leases_.end()) continue;
      finished_.push_back(std::move(found->second.thread));
      leases_.erase(found);
    }
    for (const rwapi::Lease& lease : answer.leases()) {
      listed.insert(lease.id());
      auto found = leases_.find(lease.id());
      bool offered = lease.state() == rwapi::PENDING || lease.state() == rwapi::ACTIVE;
      if (offered && found == leases_.end()) {
        if (Occupied() < options_.capacity) {
          StartLease(lease);
          ++started;
        } else {
          // More than its slots: given back, for the engine to place.
          Decline(lease, absl::StrCat("bot ", options_.bot_id, " has no free slot (capacity ",
                                      options_.capacity, ")"));
          ++declined;
        }
      } else if (offered && found->second.lease.state() == rwapi::CANCELLED) {
        ++declined;  // its last run is still ending: the engine offers it again
      } else if (found != leases_.end() && lease.state() == rwapi::CANCELLED &&
                 found->second.lease.state() == rwapi::ACTIVE) {
        found->second.lease.set_state(rwapi::CANCELLED);
        found->second.cancel->Cancel("the engine cancelled the lease");
        ++cancelled;
      }
    }
    // A lease the engine no longer lists is not this bot's any more.
    for (auto& [id, running] : leases_) {
      if (sent_active.count(id) && !listed.count(id) && running.lease.state() == rwapi::ACTIVE) {
        running.lease.set_state(rwapi::CANCELLED);
        running.cancel->Cancel("the engine no longer lists the lease");
        ++cancelled;
      }
    }
    // BuildGrid holds an update for work only while the version it was
    // given is its own, and lists the bot's leases afresh only when it is
    // not: a lease not taken must be offered again.
    if (declined == 0) session_.set_version(answer.version());
  }
  if (started > 0 || cancelled > 0 || declined > 0) {
    spdlog::info("bot {}: {} leases started, {} cancelled by the engine, {} given back",
                 options_.bot_id, started, cancelled, declined);
  }
  return started > 0 || cancelled > 0 || declined > 0 || !reported.empty();
}

void BotSession::Loop() {
  if (!CreateUntilStopped()) return;
  absl::Duration backoff = absl::Seconds(1);
  while (!stop_.HasBeenNotified()) {
    std::vector<std::thread> ended;
    bool full = false;
    {
      absl::MutexLock lock(&mu_);
      if (Occupied() >= options_.capacity && !SomeLeaseEnded()) {
        // No room for work, nothing to report: only that the bot is alive.
        auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return SomeLeaseEnded() || stop_.HasBeenNotified();
        };
        mu_.AwaitWithTimeout(absl::Condition(&woken), kFullUpdateEvery);
      }
      full = Occupied() >= options_.capacity;
      ended.swap(finished_);
    }
    for (std::thread& thread : ended) {
      if (thread.joinable()) thread.join();
    }
    if (stop_.HasBeenNotified()) break;
    rwapi::BotSession sent = Snapshot(rwapi::OK);
    const absl::Time asked = absl::Now();
    absl::StatusOr<rwapi::BotSession> answer =
        Update(sent, full ? kFullUpdateDeadline : kWaitForWorkDeadline);
    if (answer.ok()) {
      backoff = absl::Seconds(1);
      bool changed = Reconcile(sent, *answer);
      // An engine that answers at once with nothing new is asked again
      // a second later, not in a loop.
      if (!changed && absl::Now() - asked < kMinQuietInterval) Pause(kMinQuietInterval);
      continue;
    }
    if (stop_.HasBeenNotified()) break;
    // A lease ended during a held update (RunLease ended it), or the
    // engine held it to the deadline with no work: report, ask again (a
    // second after the last ask at the soonest).
    if ((absl::IsCancelled(answer.status()) && LeaseEnded()) ||
        (absl::IsDeadlineExceeded(answer.status()) && !full)) {
      Pause(kMinQuietInterval - (absl::Now() - asked));
      continue;
    }
    if (SessionGone(answer.status())) {
      spdlog::warn(
          "bot {}: {} no longer has its session ({}); opening a new one (another bot with the "
          "same --name takes its session)",
          options_.bot_id, options_.engine_address, answer.status().ToString());
      // Restarted, or the session expired: its leases went back to the
      // engine's queue.
      {
        absl::MutexLock lock(&mu_);
        for (auto& [id, running] : leases_) {
          running.lease.set_state(rwapi::CANCELLED);
          running.cancel->Cancel("the engine forgot the bot's session");
        }
        session_.clear_name();
        session_.clear_version();
      }
      if (!CreateUntilStopped()) break;
      continue;
    }
    spdlog::warn("bot {}: updating its session on {} failed: {}; trying again in {}",
                 options_.bot_id, options_.engine_address, answer.status().ToString(),
                 absl::FormatDuration(backoff));
    Pause(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  // Stopping: every lease ends (cancelled), is reported, and the session
  // says the bot is going.
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, running] : leases_) {
      running.cancel->Cancel("the worker is stopping");
      if (running.thread.joinable()) threads.push_back(std::move(running.thread));
    }
    for (std::thread& thread : finished_) threads.push_back(std::move(thread));
    finished_.clear();
  }
  for (std::thread& thread : threads) {
    if (thread.joinable()) thread.join();
  }
  if (name().empty()) return;
  absl::StatusOr<rwapi::BotSession> last =
      Update(Snapshot(rwapi::BOT_TERMINATING), absl::Seconds(2));
  if (last.ok() && last->leases_size() > 0) {
    // Work the engine gave as the bot said it goes: given back at once.
    rwapi::BotSession back = Snapshot(rwapi::BOT_TERMINATING);
    back.clear_leases();
    for (rwapi::Lease lease : last->leases()) {
      if (lease.state() != rwapi::PENDING && lease.state() != rwapi::ACTIVE) continue;
      lease.set_state(rwapi::COMPLETED);
      SetLeaseStatus(absl::UnavailableError(absl::StrCat("bot ", options_.bot_id, " is stopping")),
                     lease);
      *back.add_leases() = lease;
    }
    if (back.leases_size() > 0) last = Update(back, absl::Seconds(2));
  }
  if (!last.ok()) {
    spdlog::warn("bot {}: could not tell {} it is stopping: {}", options_.bot_id,
                 options_.engine_address, last.status().ToString());
  }
}

}  // namespace distcc_cuda::worker
