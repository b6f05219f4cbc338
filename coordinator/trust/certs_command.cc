// SPDX-License-Identifier: Apache-2.0
#include "coordinator/trust/certs_command.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/transport/certificates.h"

namespace distcc_cuda::coordinator {

const char kCertsUsage[] =
    "Makes the cluster's certificate authority and the certificates of its\n"
    "coordinator, workers and clients, for mutual TLS.\n"
    "Usage:\n"
    "  distcc-cuda-coordinator certs init --dir DIR [--cluster NAME]\n"
    "      writes DIR/ca.crt and DIR/ca.key (the CA's key: keep it in DIR).\n"
    "      Refuses to replace a CA that is there.\n"
    "  distcc-cuda-coordinator certs issue --dir DIR --role ROLE [--host HOST]... NAME\n"
    "      writes DIR/NAME.crt and DIR/NAME.key, signed by the CA in DIR.\n"
    "      ROLE is client (submits builds, reads status), worker (runs units)\n"
    "      or coordinator, whose certificate needs a --host for every name or\n"
    "      address that clients and workers dial it by.\n"
    "Each program then takes --tls-ca DIR/ca.crt --tls-cert NAME.crt\n"
    "--tls-key NAME.key, or the same settings in its config file.\n";

namespace {

constexpr char kDefaultCluster[] = "distcc-cuda";

absl::Status CertsUsageError(absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("certs: ", message, " (see distcc-cuda-coordinator certs --help)"));
}

// The parsed command line of one subcommand: --NAME VALUE or --NAME=VALUE
// options (each may repeat) and positional arguments.
struct ParsedArgs {
  std::map<std::string, std::vector<std::string>> options;
  std::vector<std::string> positional;
};

absl::StatusOr<ParsedArgs> Parse(const std::vector<std::string>& args, size_t first,
                                 const std::vector<std::string>& known) {
  ParsedArgs parsed;
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!absl::StartsWith(arg, "-")) {
      parsed.positional.push_back(arg);
      continue;
    }
    size_t start = arg.find_first_not_of('-');
    if (start == std::string::npos) return CertsUsageError(absl::StrCat("cannot read '", arg, "'"));
    std::string name = arg.substr(start);
    std::optional<std::string> value;
    if (size_t equals = name.find('='); equals != std::string::npos) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return CertsUsageError(absl::StrCat("unknown option ", arg, " for '", args[first - 1],
                                          "'; it takes --", absl::StrJoin(known, ", --")));
    }
    if (!value) {
      if (i + 1 >= args.size()) return CertsUsageError(absl::StrCat(arg, " needs a value"));
      value = args[++i];
    }
    parsed.options[name].push_back(*value);
  }
  return parsed;
}

// The one value of option `name`, or `fallback` when absent.
absl::StatusOr<std::string> Single(const ParsedArgs& parsed, const std::string& name,
                                   std::optional<std::string> fallback = std::nullopt) {
  auto it = parsed.options.find(name);
  if (it == parsed.options.end()) {
    if (fallback) return *fallback;
    return CertsUsageError(absl::StrCat("--", name, " is required"));
  }
  if (it->second.size() > 1) return CertsUsageError(absl::StrCat("--", name, " is given twice"));
  return it->second.front();
}

// How the holder of a new certificate starts with it.
std::string NextStep(PeerRole role, const std::string& dir, const std::string& name,
                     const std::vector<std::string>& hosts) {
  std::string files = absl::StrCat("--tls-ca ", dir, "/ca.crt --tls-cert ", dir, "/", name,
                                   ".crt --tls-key ", dir, "/", name, ".key");
  switch (role) {
    case PeerRole::kCoordinator:
      return absl::StrCat(
          "next: distcc-cuda-coordinator --listen 0.0.0.0:3633 --state-dir STATE_DIR ", files,
          "\n      clients and workers must dial it as one of: ", absl::StrJoin(hosts, ", "), "\n");
    case PeerRole::kWorker:
      return absl::StrCat(
          "next: copy ca.crt, ", name, ".crt and ", name, ".key to the worker's machine and run\n",
          "      distcc-cuda-worker --coordinator HOST:3633 --name ", name, " ", files, "\n");
    case PeerRole::kClient:
      return absl::StrCat("next: give ca.crt, ", name, ".crt and ", name, ".key to ", name,
                          ", who builds with\n", "      distcc-cuda build PLAN --coordinator ",
                          "HOST:3633 ", files, "\n");
  }
  return "";
}

absl::Status RunInit(const std::vector<std::string>& args, std::ostream& out) {
  ASSIGN_OR_RETURN(ParsedArgs parsed, Parse(args, 1, {"dir", "cluster"}));
  if (!parsed.positional.empty()) {
    return CertsUsageError(
        absl::StrCat("'init' takes no argument '", parsed.positional.front(), "'"));
  }
  ASSIGN_OR_RETURN(std::string dir, Single(parsed, "dir"));
  ASSIGN_OR_RETURN(std::string cluster, Single(parsed, "cluster", kDefaultCluster));
  ASSIGN_OR_RETURN(CertificateFiles files, InitCertificateAuthority(dir, cluster));
  out << "wrote " << files.certificate_path << " (the CA certificate of cluster " << cluster
      << ": every coordinator, worker and client gets a copy)\n"
      << "wrote " << files.key_path
      << " (the CA's private key, mode 0600: whoever holds it can join the cluster in any role; "
         "keep it here)\n"
      << "next: distcc-cuda-coordinator certs issue --dir " << dir
      << " --role coordinator --host HOST NAME\n";
  return absl::OkStatus();
}

absl::Status RunIssue(const std::vector<std::string>& args, std::ostream& out) {
  ASSIGN_OR_RETURN(ParsedArgs parsed, Parse(args, 1, {"dir", "role", "host"}));
  if (parsed.positional.size() != 1) {
    return CertsUsageError(
        absl::StrCat("'issue' takes one NAME, the certificate holder's, not ",
                     parsed.positional.empty()
                         ? std::string("none")
                         : absl::StrCat("'", absl::StrJoin(parsed.positional, "' '"), "'")));
  }
  ASSIGN_OR_RETURN(std::string dir, Single(parsed, "dir"));
  ASSIGN_OR_RETURN(std::string role_name, Single(parsed, "role"));
  absl::StatusOr<PeerRole> role = ParseRole(role_name);
  if (!role.ok()) return CertsUsageError(absl::StrCat("--role: ", role.status().message()));
  IssueOptions options;
  options.role = *role;
  options.name = parsed.positional.front();
  if (auto hosts = parsed.options.find("host"); hosts != parsed.options.end()) {
    options.hosts = hosts->second;
  }
  ASSIGN_OR_RETURN(CertificateFiles files, IssueCertificateFiles(dir, options));
  out << "wrote " << files.certificate_path << " (a " << RoleName(options.role)
      << " certificate for " << options.name << ")\n"
      << "wrote " << files.key_path << " (its private key, mode 0600)\n"
      << NextStep(options.role, dir, options.name, options.hosts);
  return absl::OkStatus();
}

}  // namespace

absl::Status RunCertsCommand(const std::vector<std::string>& args, std::ostream& out) {
  if (args.empty()) return CertsUsageError("say 'init' or 'issue'");
  const std::string& command = args.front();
  if (command == "--help" || command == "-h" || command == "-help" || command == "help") {
    out << kCertsUsage;
    return absl::OkStatus();
  }
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      out << kCertsUsage;
      return absl::OkStatus();
    }
  }
  if (command == "init") return RunInit(args, out);
  if (command == "issue") return RunIssue(args, out);
  return CertsUsageError(absl::StrCat("unknown command '", command, "'; say 'init' or 'issue'"));
}

}  // namespace distcc_cuda::coordinator
