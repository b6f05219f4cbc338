// SPDX-License-Identifier: Apache-2.0
// The coordinator's live dashboard (--http-listen) during a build on two
// workers with the fake compiler: its JSON answers, and the page as headless
// Chromium (Debian's package) renders it: both workers and a running unit,
// then the build's timeline. Screenshots go to build/screenshots/.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/stages/build_command.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "coordinator/coordinator.h"
#include "coordinator/trust/revoke_command.h"
#include "nlohmann/json.hpp"
#include "tests/integration/operated_cluster.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/test_paths.h"
#include "worker/worker.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
// Debian's chromium, if installed (scripts/test installs it).
std::string ChromiumPath() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

// `url` as headless Chromium renders it once its scripts have run: the DOM,
// and a screenshot at `screenshot` if given.
std::string Render(const std::string& url, const std::string& screenshot = "") {
  ProcessSpec spec;
  spec.argv = {ChromiumPath(),
               "--headless=new",
               "--no-sandbox",
               "--disable-gpu",
               "--hide-scrollbars",
               "--window-size=1280,900",
               "--virtual-time-budget=4000",
               "--no-first-run",
               "--user-data-dir=" + testing::NewTempDir("chromium-")};
  spec.argv.push_back(screenshot.empty() ? "--dump-dom" : "--screenshot=" + screenshot);
  spec.argv.push_back(url);
  spec.timeout = absl::Seconds(90);
  spec.output_limit_bytes = 16 << 20;
  absl::StatusOr<ProcessResult> run = RunProcess(spec);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return "";
  EXPECT_EQ(run->exit_code, 0) << run->stderr_text;
  return run->stdout_text;
}

int Count(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

class DashboardTest : public testing::OperatedClusterTest {
 protected:
  void SetUp() override {
    coordinator::CoordinatorOptions options;
    options.http_listen = "127.0.0.1:0";
    options.prediction.peak_bytes = 256 * kMiB;
    StartCluster("dashboard-", options, 1024 * kMiB);
    if (HasFatalFailure()) return;
    screenshots_ =
        std::filesystem::path(testing::BinaryPath("distcc-cuda")).parent_path().parent_path() /
        "screenshots";
    std::filesystem::create_directories(screenshots_);
  }

  nlohmann::json Api(const std::string& path) {
    absl::StatusOr<std::string> body = testing::HttpGet(coordinator_->dashboard_url() + path);
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? nlohmann::json::parse(*body, nullptr, false) : nlohmann::json();
  }

  std::filesystem::path screenshots_;
};

TEST_F(DashboardTest, AnswersJsonAndRefusesWhatIsNotABuildId) {
  const std::string url = coordinator_->dashboard_url();
  ASSERT_THAT(url, HasSubstr("http://127.0.0.1:"));
  nlohmann::json status = Api("/api/status");
  ASSERT_TRUE(status.is_object());
  ASSERT_EQ(status["workers"].size(), 2u);
  EXPECT_EQ(status["workers"][0]["memoryCapBytes"], std::to_string(1024 * kMiB));
  for (const char* page : {"/", "/dashboard.js", "/dashboard.css"}) {
    auto answer = testing::HttpCall("GET", url + page);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 200) << page;
    EXPECT_FALSE(answer->body.empty()) << page;
  }
  auto html = testing::HttpCall("GET", url + "/");
  ASSERT_TRUE(html.ok());
  EXPECT_THAT(html->content_type, HasSubstr("text/html"));
  // Nothing is fetched from elsewhere: every script and style is its own.
  EXPECT_FALSE(std::regex_search(html->body, std::regex(R"((src|href)="(https?:)?//)")));
  for (const auto& [query, code] : std::vector<std::pair<std::string, int>>{
           {"?id=../../etc/passwd", 400}, {"?id=", 400}, {"", 400}, {"?id=b-no-such-build", 404}}) {
    auto answer = testing::HttpCall("GET", url + "/api/build" + query);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, code) << query;
  }
  auto post = testing::HttpCall("POST", url + "/api/status");
  ASSERT_TRUE(post.ok());
  EXPECT_EQ(post->status, 405);
}

TEST_F(DashboardTest, ChromiumShowsBothWorkersARunningUnitARevokedNameAndThenTheTimeline) {
  if (ChromiumPath().empty()) {
    GTEST_SKIP() << "no chromium here (Debian's package; scripts/test installs it)";
  }
  ASSERT_TRUE(WriteFileAtomically(root_ + "/src/kernels.toml",
                                  "[build]\noutput = \"libd.so\"\nsources = [\"attn_fwd.cu\", "
                                  "\"attn_bwd.cu\", \"api.cu\"]\n")
                  .ok());
  // The two long units run until the pages are rendered, however long
  // Chromium takes to start on a loaded machine.
  for (const char* unit : {"attn_fwd", "attn_bwd"}) {
    ASSERT_TRUE(WriteFileAtomically(root_ + "/src/" + unit + ".cu",
                                    absl::StrCat("int ", unit, "(); // FAKE_TOUCH_MIB=300 ",
                                                 HeldUntilRelease(), "\n"))
                    .ok());
  }
  ASSERT_TRUE(WriteFileAtomically(root_ + "/src/api.cu", "int api(); // FAKE_SLEEP_MS=200\n").ok());
  std::string out;
  absl::Status built;
  std::thread build([&] {
    client::BuildOptions options;
    options.plan_path = root_ + "/src/kernels.toml";
    options.coordinator_address = coordinator_->address();
    options.output_dir = root_ + "/out";
    options.nvcc_path = testing::FakeNvccPath();
    std::ostringstream stream;
    built = client::RunBuild(options, stream);
    out = stream.str();
  });
  // Both long units running, and their memory reported by a heartbeat.
  bool busy = false;
  for (int i = 0; i < 300 && !busy; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    nlohmann::json status = Api("/api/status");
    busy = status.is_object() && status["running"].size() == 2 &&
           std::stoll(status["workers"][0]["memoryUsedBytes"].get<std::string>()) > 0 &&
           std::stoll(status["workers"][1]["memoryUsedBytes"].get<std::string>()) > 0;
  }
  EXPECT_TRUE(busy) << "two units never ran at once";
  // A revoked worker name is drawn with its reason.
  std::ostringstream said;
  ASSERT_TRUE(coordinator::RunRevokeCommand({"--state-dir", root_ + "/coordinator", "--reason",
                                             "its key was on a lost laptop", "stolen-laptop"},
                                            said)
                  .ok())
      << said.str();
  bool listed = false;
  for (int i = 0; i < 100 && !listed; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    nlohmann::json status = Api("/api/status");
    listed = status.is_object() && status["revokedWorkers"].size() == 1;
  }
  EXPECT_TRUE(listed) << "the revocation never reached /api/status";
  const std::string url = coordinator_->dashboard_url() + "/";
  std::string dom = Render(url);
  EXPECT_THAT(dom, HasSubstr("data-revoked=\"stolen-laptop\""));
  EXPECT_THAT(dom, HasSubstr("UTC: its key was on a lost laptop"));
  EXPECT_THAT(dom, HasSubstr("data-worker=\"worker-a\""));
  EXPECT_THAT(dom, HasSubstr("data-worker=\"worker-b\""));
  // Each worker's nvcc, and where its toolkit came from.
  EXPECT_THAT(dom, HasSubstr("data-toolkit=\"installed\""));
  EXPECT_THAT(dom, HasSubstr("data-toolkit=\"served\""));
  EXPECT_THAT(dom, HasSubstr(", fetched from the coordinator<"));
  EXPECT_THAT(dom, HasSubstr("title=\"served by the coordinator: CUDA 13.2.86, fetched in 2.2s\""));
  EXPECT_TRUE(absl::StrContains(dom, "data-unit=\"attn_fwd\"") ||
              absl::StrContains(dom, "data-unit=\"attn_bwd\""))
      << dom;
  EXPECT_THAT(dom, HasSubstr(">running<"));
  EXPECT_THAT(dom, HasSubstr("2 workers · 2 units running"));
  Render(url, (screenshots_ / "dashboard.png").string());
  EXPECT_TRUE(std::filesystem::file_size(screenshots_ / "dashboard.png") > 10000);

  Release();
  build.join();
  ASSERT_TRUE(built.ok()) << built << "\n" << out;
  std::smatch id;
  ASSERT_TRUE(std::regex_search(out, id, std::regex("build (b[0-9a-f-]+) on"))) << out;
  const std::string timeline = url + "?build=" + id[1].str();
  std::string ended = Render(timeline);
  EXPECT_THAT(ended, HasSubstr(">succeeded<"));
  // One bar per unit, each named with its worker.
  EXPECT_EQ(Count(ended, "<rect "), 3) << ended;
  EXPECT_THAT(ended, HasSubstr("attn_fwd · worker-"));
  EXPECT_THAT(ended, HasSubstr("api · worker-"));
  Render(timeline, (screenshots_ / "dashboard-timeline.png").string());
  EXPECT_TRUE(std::filesystem::file_size(screenshots_ / "dashboard-timeline.png") > 10000);
}

}  // namespace
}  // namespace distcc_cuda
