// SPDX-License-Identifier: Apache-2.0
#include "tests/support/background_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"

namespace distcc_cuda::testing {

ProcessResult RunToEnd(const std::vector<std::string>& argv, absl::Duration timeout) {
  ProcessSpec spec;
  spec.argv = argv;
  spec.timeout = timeout;
  return RunToEnd(spec);
}

ProcessResult RunToEnd(const ProcessSpec& spec) {
  absl::StatusOr<ProcessResult> result = RunProcess(spec);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : ProcessResult{};
}

absl::StatusOr<std::unique_ptr<BackgroundProcess>> BackgroundProcess::Start(
    const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log, 1);
    dup2(log, 2);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(log);
  auto process = std::unique_ptr<BackgroundProcess>(new BackgroundProcess());
  process->pid_ = pid;
  process->log_path_ = log_path;
  return process;
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ <= 0 || reaped_) return;
  // Asked to stop first, as an operator would, so that it removes what it
  // made (a worker's memory cgroup); a stopped (SIGSTOP) process is woken
  // to hear it. Killed when it does not exit within 5 s.
  kill(pid_, SIGTERM);
  kill(pid_, SIGCONT);
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

std::string BackgroundProcess::Log() const {
  absl::StatusOr<std::string> log = ReadFile(log_path_);
  return log.ok() ? *log : "";
}

absl::StatusOr<std::string> BackgroundProcess::WaitForLog(const std::string& text,
                                                          absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::string log = Log();
    size_t at = log.find(text);
    if (at != std::string::npos) {
      size_t begin = log.rfind('\n', at);
      begin = begin == std::string::npos ? 0 : begin + 1;
      return log.substr(begin, log.find('\n', at) - begin);
    }
    int status = 0;
    if (!reaped_ && waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      return absl::DeadlineExceededError(
          absl::StrCat("process exited before logging '", text, "':\n", Log()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("'", text, "' not logged within ", absl::FormatDuration(timeout), ":\n", Log()));
}

absl::StatusOr<int> BackgroundProcess::Stop(int signal, absl::Duration timeout) {
  if (reaped_) return absl::FailedPreconditionError("already exited");
  kill(pid_, signal);
  absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (absl::Now() < deadline) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError("process did not exit in time");
}

}  // namespace distcc_cuda::testing
