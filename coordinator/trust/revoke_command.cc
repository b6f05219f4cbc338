// SPDX-License-Identifier: Apache-2.0
#include "coordinator/trust/revoke_command.h"

#include <filesystem>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/files.h"
#include "coordinator/trust/revocations.h"

namespace distcc_cuda::coordinator {

const char kRevokeUsage[] =
    "Stops trusting a worker identity: the name in its certificate.\n"
    "Usage:\n"
    "  distcc-cuda-coordinator revoke --state-dir DIR [--reason TEXT] NAME\n"
    "      refuses every call of a worker certificate named NAME, drops its\n"
    "      workers (their units run elsewhere) and every cached result it\n"
    "      produced. A running coordinator on DIR acts within a second.\n"
    "  distcc-cuda-coordinator revoke --state-dir DIR --lift NAME\n"
    "      trusts NAME again (its dropped results stay dropped).\n"
    "  distcc-cuda-coordinator revoke --state-dir DIR --list\n"
    "      lists the revoked names, since when and why (a cross-check's\n"
    "      quarantine is a revocation too).\n";

namespace {

absl::Status RevokeUsageError(absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("revoke: ", message, " (see distcc-cuda-coordinator revoke --help)"));
}

struct RevokeArgs {
  std::string state_dir;
  std::string reason = "revoked by an operator";
  std::optional<std::string> name;
  bool lift = false;
  bool list = false;
  bool help = false;
};

absl::StatusOr<RevokeArgs> ParseRevokeArgs(const std::vector<std::string>& args) {
  RevokeArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::optional<std::string> value;
    if (size_t equals = arg.find('='); absl::StartsWith(arg, "--") && equals != std::string::npos) {
      value = arg.substr(equals + 1);
      arg = arg.substr(0, equals);
    }
    auto take = [&]() -> absl::StatusOr<std::string> {
      if (value) return *value;
      if (i + 1 >= args.size()) return RevokeUsageError(absl::StrCat(arg, " needs a value"));
      return args[++i];
    };
    if (arg == "--help" || arg == "-h") {
      parsed.help = true;
    } else if (arg == "--list") {
      parsed.list = true;
    } else if (arg == "--lift") {
      parsed.lift = true;
    } else if (arg == "--state-dir" || arg == "--state_dir" || arg == "--reason") {
      absl::StatusOr<std::string> text = take();
      if (!text.ok()) return text.status();
      (arg == "--reason" ? parsed.reason : parsed.state_dir) = *text;
    } else if (absl::StartsWith(arg, "-")) {
      return RevokeUsageError(
          absl::StrCat("unknown option ", arg, "; it takes --state-dir, --reason, --lift, --list"));
    } else if (parsed.name) {
      return RevokeUsageError("give one worker name at a time");
    } else {
      parsed.name = arg;
    }
  }
  return parsed;
}

void PrintList(const WorkerRevocations& revocations, std::ostream& out) {
  std::vector<Revocation> list = revocations.List();
  if (list.empty()) out << "no worker is revoked\n";
  for (const Revocation& revoked : list) {
    out << revoked.name << "  since "
        << absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                            absl::FromUnixSeconds(revoked.since_unix_seconds), absl::UTCTimeZone())
        << "  " << revoked.reason << "\n";
  }
}

}  // namespace

absl::Status RunRevokeCommand(const std::vector<std::string>& args, std::ostream& out) {
  absl::StatusOr<RevokeArgs> parsed = ParseRevokeArgs(args);
  if (!parsed.ok()) return parsed.status();
  if (parsed->help) {
    out << kRevokeUsage;
    return absl::OkStatus();
  }
  if (parsed->state_dir.empty()) return RevokeUsageError("--state-dir DIR is required");
  if (!std::filesystem::is_directory(parsed->state_dir)) {
    return absl::NotFoundError(absl::StrCat(
        "revoke: ", parsed->state_dir,
        " is not a folder; give the --state-dir of the coordinator that should refuse the worker"));
  }
  if (parsed->list == (parsed->name.has_value())) {
    return RevokeUsageError("give a worker NAME, or --list");
  }
  absl::StatusOr<std::unique_ptr<WorkerRevocations>> revocations =
      WorkerRevocations::Open(RevocationsPathIn(parsed->state_dir));
  if (!revocations.ok()) return revocations.status();
  if (parsed->list) {
    PrintList(**revocations, out);
    return absl::OkStatus();
  }
  if (parsed->lift) {
    absl::Status lifted = (*revocations)->Lift(*parsed->name);
    if (!lifted.ok()) return lifted;
    out << "worker " << *parsed->name
        << " is trusted again; its workers may register (its dropped results stay dropped)\n";
    return absl::OkStatus();
  }
  absl::StatusOr<bool> added = (*revocations)->Revoke(*parsed->name, parsed->reason, absl::Now());
  if (!added.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("revoke: ", added.status().message()));
  }
  out << "worker " << *parsed->name
      << (*added ? " revoked: a coordinator running on "
                 : " was revoked already: the coordinator on ")
      << parsed->state_dir
      << " refuses its calls, drops its workers and every cached result it produced\n";
  return absl::OkStatus();
}

}  // namespace distcc_cuda::coordinator
