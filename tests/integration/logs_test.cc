// SPDX-License-Identifier: Apache-2.0
// --log-format json on the binaries users run: a coordinator and two workers
// on 127.0.0.1 with the fake compiler build a plan in which one unit is
// killed for memory; every line they log is one JSON object, and the lines
// about a build, a unit or a worker say which.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/process/subprocess.h"
#include "nlohmann/json.hpp"
#include "tests/support/loopback_cluster.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

// Every line of `log` as JSON; a line that is not fails the test. `allowed`
// are the lines a program writes on stdout for scripts (not log lines).
std::vector<nlohmann::json> JsonLines(const std::string& log, const std::string& program,
                                      const std::vector<std::string>& allowed = {}) {
  std::vector<nlohmann::json> lines;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    bool stdout_line = false;
    for (const std::string& prefix : allowed) stdout_line |= absl::StartsWith(line, prefix);
    if (stdout_line) continue;
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(parsed.is_object()) << program << " wrote a line that is not JSON: " << line;
    if (!parsed.is_object()) continue;
    for (const char* key : {"time", "level", "program", "message"}) {
      EXPECT_TRUE(parsed.contains(key) && parsed[key].is_string()) << key << " missing: " << line;
    }
    EXPECT_EQ(parsed.value("program", ""), program) << line;
    EXPECT_TRUE(absl::EndsWith(parsed.value("time", ""), "Z")) << line;
    lines.push_back(std::move(parsed));
  }
  return lines;
}

// The lines whose message contains `text`.
std::vector<nlohmann::json> Matching(const std::vector<nlohmann::json>& lines,
                                     const std::string& text) {
  std::vector<nlohmann::json> found;
  for (const nlohmann::json& line : lines) {
    if (absl::StrContains(line.value("message", ""), text)) found.push_back(line);
  }
  return found;
}

TEST(JsonLogsTest, EveryLineIsAnObjectAndLinesAboutABuildUnitOrWorkerNameThem) {
  const std::string root = testing::NewTempDir("json-logs-");
  const std::string nvcc = testing::FakeNvccPath();
  ASSERT_TRUE(WriteFileAtomically(root + "/src/kernels.toml",
                                  "[build]\noutput = \"libj.so\"\nsources = [\"ok.cu\", "
                                  "\"big.cu\"]\n")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/src/ok.cu", "int ok(); // FAKE_SLEEP_MS=50\n").ok());
  // big is killed wherever it runs (no cap holds it): its long sleep costs
  // nothing, and a watchdog starved by a loaded machine still sees its peak.
  ASSERT_TRUE(WriteFileAtomically(root + "/src/big.cu",
                                  "int big(); // FAKE_TOUCH_MIB=768 FAKE_SLEEP_MS=10000\n")
                  .ok());
  const std::vector<std::string> json = {"--log-format=json"};
  std::vector<std::string> worker_args = {"--log-format=json", "--memory-mechanism=watchdog"};
  auto cluster = testing::LoopbackCluster::Start(
      root, nvcc,
      {{"json-a", 1, "512MiB", false, worker_args}, {"json-b", 1, "512MiB", false, worker_args}},
      {"--log-format=json", "--default-unit-memory=64MiB"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ProcessSpec build;
  build.argv = {testing::BinaryPath("distcc-cuda"),
                "build",
                root + "/src/kernels.toml",
                "--coordinator",
                (*cluster)->address(),
                "--nvcc",
                nvcc,
                "-o",
                root + "/out",
                "--verbose",
                "--log-format=json"};
  build.timeout = absl::Minutes(2);
  absl::StatusOr<ProcessResult> run = RunProcess(build);
  ASSERT_TRUE(run.ok()) << run.status();
  // big fails (no worker's cap holds it); ok compiles.
  ASSERT_EQ(run->exit_code, 1) << run->stdout_text << run->stderr_text;
  EXPECT_THAT(run->stdout_text + run->stderr_text, HasSubstr("killed for memory"));
  std::smatch id;
  const std::string client_out = run->stdout_text + run->stderr_text;
  ASSERT_TRUE(std::regex_search(client_out, id, std::regex("build (b[0-9a-f-]+) on")))
      << client_out;
  const std::string build_id = id[1];

  // The coordinator: every line JSON but the one it prints for scripts.
  std::vector<nlohmann::json> coordinator =
      JsonLines((*cluster)->coordinator().Log(), "distcc-cuda-coordinator", {"listening on "});
  std::vector<nlohmann::json> joined = Matching(coordinator, " joined: ");
  ASSERT_EQ(joined.size(), 2u);
  std::set<std::string> joined_workers;
  for (const nlohmann::json& line : joined) joined_workers.insert(line.value("worker", ""));
  EXPECT_EQ(joined_workers, (std::set<std::string>{"json-a", "json-b"}));
  std::vector<nlohmann::json> requeued = Matching(coordinator, "re-queueing unit big");
  ASSERT_FALSE(requeued.empty()) << (*cluster)->coordinator().Log();
  for (const nlohmann::json& line : requeued) {
    EXPECT_EQ(line.value("build", ""), build_id) << line;
    EXPECT_EQ(line.value("unit", ""), "big") << line;
    EXPECT_THAT(line.value("worker", ""), ::testing::AnyOf("json-a", "json-b")) << line;
    EXPECT_EQ(line.value("level", ""), "warning") << line;
  }
  for (const char* about_the_build : {"finished: ", "eligible workers"}) {
    std::vector<nlohmann::json> lines = Matching(coordinator, about_the_build);
    ASSERT_FALSE(lines.empty()) << about_the_build;
    for (const nlohmann::json& line : lines) EXPECT_EQ(line.value("build", ""), build_id) << line;
  }

  // Each worker: every line JSON and about that worker; a unit's lines name
  // the unit, its task and its build.
  int units_run = 0;
  for (auto& worker : (*cluster)->workers()) {
    std::vector<nlohmann::json> lines = JsonLines(worker->Log(), "distcc-cuda-worker");
    ASSERT_FALSE(lines.empty());
    const std::string name = lines.front().value("worker", "");
    EXPECT_THAT(name, ::testing::AnyOf("json-a", "json-b"));
    for (const nlohmann::json& line : lines) EXPECT_EQ(line.value("worker", ""), name) << line;
    for (const nlohmann::json& line : Matching(lines, " runs unit ")) {
      ++units_run;
      EXPECT_EQ(line.value("build", ""), build_id) << line;
      EXPECT_THAT(line.value("unit", ""), ::testing::AnyOf("ok", "big")) << line;
      EXPECT_TRUE(absl::StartsWith(line.value("task", ""), "t")) << line;
    }
  }
  // ok once, big twice (killed, retried alone, killed).
  EXPECT_EQ(units_run, 3);
  // The client's own log lines (--verbose) are JSON too; its progress is text.
  for (absl::string_view line : absl::StrSplit(run->stderr_text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "{")) {
      EXPECT_TRUE(nlohmann::json::parse(line, nullptr, false).is_object()) << line;
    }
  }
}

TEST(JsonLogsTest, AnUnknownFormatIsRefusedNamingBoth) {
  for (const char* program : {"distcc-cuda-coordinator", "distcc-cuda-worker"}) {
    ProcessSpec spec;
    spec.argv = {testing::BinaryPath(program), "--log-format=xml"};
    spec.timeout = absl::Seconds(20);
    absl::StatusOr<ProcessResult> run = RunProcess(spec);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->exit_code, 2) << program << ": " << run->stderr_text;
    EXPECT_THAT(run->stderr_text, HasSubstr("--log-format is 'text' or 'json'")) << program;
  }
}

}  // namespace
}  // namespace distcc_cuda
