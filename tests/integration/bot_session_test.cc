// SPDX-License-Identifier: Apache-2.0
// BotSession, the loop that makes a worker a bot of another engine, against
// a scripted Bots service on loopback: the cases a real BuildGrid
// (tests/e2e/buildgrid_test.cc) will not produce on demand. More leases
// than the bot's capacity, a lease the engine cancels, a session the engine
// forgot, an engine that answers every update at once, and a stop while a
// lease runs.
#include "worker/bot_session.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distcc_cuda::worker {
namespace {

using ::testing::HasSubstr;

// A Bots service that echoes the bot's session, drops what it reports as
// completed (keeping it for the test), offers the leases queued for it,
// and answers at once (no long poll).
class ScriptedBots final : public rwapi::Bots::Service {
 public:
  grpc::Status CreateBotSession(grpc::ServerContext*, const rwapi::CreateBotSessionRequest* request,
                                rwapi::BotSession* answer) override {
    absl::MutexLock lock(&mu_);
    ++creates_;
    *answer = request->bot_session();
    answer->set_name(absl::StrCat("main/session-", creates_));
    return grpc::Status::OK;
  }

  grpc::Status UpdateBotSession(grpc::ServerContext*, const rwapi::UpdateBotSessionRequest* request,
                                rwapi::BotSession* answer) override {
    absl::MutexLock lock(&mu_);
    ++updates_;
    last_status_ = request->bot_session().status();
    if (forget_) {
      forget_ = false;
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "Bot does not exist while validating leases.");
    }
    *answer = request->bot_session();
    answer->clear_leases();
    for (const rwapi::Lease& lease : request->bot_session().leases()) {
      if (lease.state() == rwapi::COMPLETED) {
        completed_.push_back(lease);
      } else if (cancel_.count(lease.id())) {
        rwapi::Lease cancelled = lease;
        cancelled.set_state(rwapi::CANCELLED);
        *answer->add_leases() = cancelled;
      } else {
        *answer->add_leases() = lease;
      }
    }
    for (const rwapi::Lease& offer : queued_) *answer->add_leases() = offer;
    queued_.clear();
    return grpc::Status::OK;
  }

  void Offer(const std::string& id) {
    rwapi::Lease lease;
    lease.set_id(id);
    lease.set_state(rwapi::PENDING);
    reapi::Action action;
    action.mutable_command_digest()->set_hash(id);
    lease.mutable_payload()->PackFrom(action);
    absl::MutexLock lock(&mu_);
    queued_.push_back(lease);
  }
  void Cancel(const std::string& id) {
    absl::MutexLock lock(&mu_);
    cancel_.insert(id);
  }
  void ForgetSession() {
    absl::MutexLock lock(&mu_);
    forget_ = true;
  }
  // Waits until `count` leases were reported completed; returns them.
  std::vector<rwapi::Lease> AwaitCompleted(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, count]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return completed_.size() >= count; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
    return completed_;
  }
  int creates() {
    absl::MutexLock lock(&mu_);
    return creates_;
  }
  int updates() {
    absl::MutexLock lock(&mu_);
    return updates_;
  }
  rwapi::BotStatus last_status() {
    absl::MutexLock lock(&mu_);
    return last_status_;
  }

 private:
  absl::Mutex mu_;
  int creates_ ABSL_GUARDED_BY(mu_) = 0;
  int updates_ ABSL_GUARDED_BY(mu_) = 0;
  bool forget_ ABSL_GUARDED_BY(mu_) = false;
  rwapi::BotStatus last_status_ ABSL_GUARDED_BY(mu_) = rwapi::BOT_STATUS_UNSPECIFIED;
  std::set<std::string> cancel_ ABSL_GUARDED_BY(mu_);
  std::vector<rwapi::Lease> queued_ ABSL_GUARDED_BY(mu_);
  std::vector<rwapi::Lease> completed_ ABSL_GUARDED_BY(mu_);
};

class BotSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&engine_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    channel_ =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  }

  void TearDown() override {
    bot_.reset();
    server_->Shutdown();
  }

  // A bot of `capacity` whose leases each run until `release_` is notified
  // (or they are cancelled), then succeed with exit code 0.
  void StartBot(int capacity) {
    BotOptions options;
    options.engine_address = "grpc://scripted";
    options.instance = "main";
    options.bot_id = "bot-under-test";
    options.capacity = capacity;
    bot_ = BotSession::Start(
        channel_, options,
        [this](const reapi::Action&, const std::string&, const CancelToken& cancel) {
          int now = ++running_;
          int seen = most_running_.load();
          while (now > seen && !most_running_.compare_exchange_weak(seen, now)) {
          }
          while (!release_.HasBeenNotified() && !cancel.cancelled()) {
            release_.WaitForNotificationWithTimeout(absl::Milliseconds(20));
          }
          --running_;
          LeaseOutcome outcome;
          if (cancel.cancelled()) {
            ++cancelled_;
            outcome.status = absl::CancelledError(cancel.reason());
          }
          return outcome;
        });
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (bot_->name().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    ASSERT_FALSE(bot_->name().empty());
  }

  // Waits up to 10 s for `running_` to reach `count`.
  bool AwaitRunning(int count) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (running_.load() != count && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return running_.load() == count;
  }

  ScriptedBots engine_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<BotSession> bot_;
  absl::Notification release_;
  std::atomic<int> running_{0};
  std::atomic<int> most_running_{0};
  std::atomic<int> cancelled_{0};
};

TEST_F(BotSessionTest, LeasesBeyondItsCapacityAreGivenBackAndTheRestReportedDone) {
  StartBot(1);
  engine_.Offer("lease-1");
  engine_.Offer("lease-2");
  ASSERT_TRUE(AwaitRunning(1));
  std::vector<rwapi::Lease> given_back = engine_.AwaitCompleted(1);
  ASSERT_EQ(given_back.size(), 1u);
  EXPECT_EQ(given_back[0].status().code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(given_back[0].status().message(), HasSubstr("has no free slot (capacity 1)"));
  release_.Notify();
  // lease-1's end cuts the update in flight short (RunLease), and that
  // update may have reached the engine already: the give-back it carried
  // is then reported again with the next (at least once, as the Remote
  // Workers API has it). So: until the run's report, whatever came before.
  std::vector<rwapi::Lease> done;
  const auto ran = [](const rwapi::Lease& lease) { return lease.status().code() == 0; };
  for (size_t count = 2; count <= 4; ++count) {
    done = engine_.AwaitCompleted(count);
    if (std::any_of(done.begin(), done.end(), ran)) break;
  }
  ASSERT_EQ(std::count_if(done.begin(), done.end(), ran), 1);
  for (const rwapi::Lease& lease : done) {
    if (ran(lease)) {
      EXPECT_NE(lease.id(), given_back[0].id());
      EXPECT_TRUE(lease.result().Is<reapi::ActionResult>());
    } else {
      EXPECT_EQ(lease.id(), given_back[0].id()) << "only the lease given back is reported again";
    }
  }
  EXPECT_EQ(most_running_.load(), 1);
}

TEST_F(BotSessionTest, ALeaseTheEngineCancelsIsStoppedAndNotReported) {
  StartBot(2);
  engine_.Offer("lease-doomed");
  ASSERT_TRUE(AwaitRunning(1));
  engine_.Cancel("lease-doomed");
  ASSERT_TRUE(AwaitRunning(0));
  EXPECT_EQ(cancelled_.load(), 1);
  // The bot goes on: the next lease runs and is reported, the cancelled
  // one never.
  engine_.Offer("lease-next");
  release_.Notify();
  std::vector<rwapi::Lease> done = engine_.AwaitCompleted(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id(), "lease-next");
}

TEST_F(BotSessionTest, ASessionTheEngineForgotIsOpenedAgain) {
  StartBot(1);
  engine_.ForgetSession();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (engine_.creates() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(engine_.creates(), 2);
  engine_.Offer("lease-after");
  release_.Notify();
  EXPECT_EQ(engine_.AwaitCompleted(1).size(), 1u);
}

TEST_F(BotSessionTest, AnEngineThatAnswersAtOnceIsAskedAboutOnceASecond) {
  StartBot(1);
  const int before = engine_.updates();
  absl::SleepFor(absl::Seconds(3));
  // Without the floor this loop would make thousands of calls.
  EXPECT_LE(engine_.updates() - before, 5);
  EXPECT_GE(engine_.updates() - before, 1);
}

TEST_F(BotSessionTest, StoppingReportsTheRunningLeaseUnavailableAndSaysTheBotGoes) {
  StartBot(1);
  engine_.Offer("lease-running");
  ASSERT_TRUE(AwaitRunning(1));
  bot_.reset();
  std::vector<rwapi::Lease> done = engine_.AwaitCompleted(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status().code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(done[0].status().message(), HasSubstr("is stopping"));
  EXPECT_EQ(engine_.last_status(), rwapi::BOT_TERMINATING);
}

}  // namespace
}  // namespace distcc_cuda::worker
