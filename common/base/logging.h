// SPDX-License-Identifier: Apache-2.0
// How the three programs write their logs (spdlog's default logger, on
// stderr): as text, or with --log-format json as one JSON object per line
// for a log pipeline (Loki, Elasticsearch, journald's JSON export), each with
// the time, level, program and message, and the build, unit, task and worker
// the line concerns. gRPC's own log lines go through the same logger.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda {

// Sets the format of the default logger's lines (--log-format): "text"
// (spdlog's default pattern; control characters, escape sequences and line
// breaks in a message written out as \xNN, see TerminalSafe), or
// "json": {"time": RFC 3339 UTC with microseconds, "level", "program",
// "message", then every field of the LogFields in scope on the logging
// thread}. INVALID_ARGUMENT naming both for another name. Call once, early
// in main.
absl::Status UseLogFormat(absl::string_view format, const std::string& program);

// A line for whoever reads the program's output: on stdout as it is with
// text logs, a log line (info) with JSON logs.
void LogNotice(const std::string& line);
// Why the program cannot go on: "PROGRAM: MESSAGE" on stderr with text
// logs, a log line (error) with JSON logs.
void LogFatal(const std::string& program, absl::string_view message);

// Fields added to every log line written on this thread while it lives
// (only the JSON format shows them): {"build", id}, {"unit", name},
// {"worker", name}, {"task", id}. Scopes nest; an inner field of the same
// name wins. Empty values are left out.
using LogFieldList = std::vector<std::pair<const char*, std::string>>;
class LogFields {
 public:
  LogFields(std::initializer_list<std::pair<const char*, std::string>> fields);
  // The fields of a line logged later (FieldsInScope when it was made).
  explicit LogFields(const LogFieldList& fields);
  ~LogFields();
  LogFields(const LogFields&) = delete;
  LogFields& operator=(const LogFields&) = delete;

 private:
  size_t previous_size_;
};

// The fields of the LogFields in scope on this thread, for a line written
// later, elsewhere, with them (a scope of LogFields(fields)).
LogFieldList FieldsInScope();

}  // namespace distcc_cuda
