// SPDX-License-Identifier: Apache-2.0
#include "common/base/logging.h"

#include <grpc/support/log.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/terminal_text.h"
#include "nlohmann/json.hpp"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda {
namespace {

thread_local std::vector<std::pair<const char*, std::string>> fields_in_scope;
// Set once by UseLogFormat, in main, before any other thread runs.
bool json_logs = false;

class JsonLineFormatter final : public spdlog::formatter {
 public:
  explicit JsonLineFormatter(std::string program) : program_(std::move(program)) {}

  void format(const spdlog::details::log_msg& message, spdlog::memory_buf_t& out) override {
    nlohmann::ordered_json line;
    line["time"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromChrono(message.time),
                                    absl::UTCTimeZone());
    spdlog::string_view_t level = spdlog::level::to_string_view(message.level);
    line["level"] = std::string(level.data(), level.size());
    line["program"] = program_;
    line["message"] = std::string(message.payload.data(), message.payload.size());
    for (const auto& [name, value] : fields_in_scope) {
      if (!value.empty()) line[name] = value;
    }
    // Bytes that are not UTF-8 (a file name, a compiler's message) are
    // replaced rather than failing the line.
    std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text += '\n';
    out.append(text.data(), text.data() + text.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLineFormatter>(program_);
  }

 private:
  const std::string program_;
};

// Text lines as spdlog's default pattern writes them, with what the message
// holds that a terminal or a log reader would act on written out (\xNN):
// messages carry names, paths and texts from other machines, and a line
// break or an escape sequence in one must not forge a line or clear a screen.
// The most of one message a line shows.
constexpr size_t kMaxLineBytes = 64 << 10;

class TerminalSafeFormatter final : public spdlog::formatter {
 public:
  TerminalSafeFormatter() : pattern_(std::make_unique<spdlog::pattern_formatter>()) {}

  void format(const spdlog::details::log_msg& message, spdlog::memory_buf_t& out) override {
    const absl::string_view payload(message.payload.data(), message.payload.size());
    if (IsTerminalSafe(payload)) {
      pattern_->format(message, out);
      return;
    }
    const std::string safe = TerminalSafe(payload, /*keep_newlines=*/false, kMaxLineBytes);
    spdlog::details::log_msg cleaned = message;
    cleaned.payload = spdlog::string_view_t(safe.data(), safe.size());
    pattern_->format(cleaned, out);
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<TerminalSafeFormatter>();
  }

 private:
  std::unique_ptr<spdlog::formatter> pattern_;
};

void GrpcToSpdlog(gpr_log_func_args* args) {
  LogFields fields{{"component", "grpc"}};
  spdlog::level::level_enum level = args->severity == GPR_LOG_SEVERITY_ERROR ? spdlog::level::err
                                    : args->severity == GPR_LOG_SEVERITY_INFO
                                        ? spdlog::level::info
                                        : spdlog::level::debug;
  spdlog::log(level, "grpc {}:{}: {}", args->file, args->line, args->message);
}

}  // namespace

absl::Status UseLogFormat(absl::string_view format, const std::string& program) {
  if (format == "text") {
    spdlog::set_formatter(std::make_unique<TerminalSafeFormatter>());
    return absl::OkStatus();
  }
  if (format != "json") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-format is 'text' or 'json' (one JSON object per line), not '", format, "'"));
  }
  json_logs = true;
  spdlog::set_formatter(std::make_unique<JsonLineFormatter>(program));
  // gRPC writes to stderr itself otherwise: lines no JSON reader takes.
  gpr_set_log_function(GrpcToSpdlog);
  return absl::OkStatus();
}

void LogNotice(const std::string& line) {
  if (json_logs) {
    spdlog::info("{}", line);
  } else {
    // A notice may quote a peer (a coordinator's toolkit): safe, as a log line is.
    std::cout << TerminalSafe(line, false, kMaxLineBytes) << std::endl;
  }
}

void LogFatal(const std::string& program, absl::string_view message) {
  if (json_logs) {
    spdlog::error("{}", std::string(message));
  } else {
    std::cerr << program << ": " << TerminalSafe(message, /*keep_newlines=*/true, kMaxLineBytes)
              << "\n";
  }
}

LogFields::LogFields(std::initializer_list<std::pair<const char*, std::string>> fields)
    : previous_size_(fields_in_scope.size()) {
  fields_in_scope.insert(fields_in_scope.end(), fields.begin(), fields.end());
}

LogFields::LogFields(const LogFieldList& fields) : previous_size_(fields_in_scope.size()) {
  fields_in_scope.insert(fields_in_scope.end(), fields.begin(), fields.end());
}

LogFields::~LogFields() { fields_in_scope.resize(previous_size_); }

LogFieldList FieldsInScope() {
  return LogFieldList(fields_in_scope.begin(), fields_in_scope.end());
}

}  // namespace distcc_cuda
