// SPDX-License-Identifier: Apache-2.0
#include "client/launcher/launcher.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cluster/embedded_cluster.h"
#include "client/launcher/remote_compile.h"
#include "client/plan/workspace_layout.h"
#include "client/scan/scan_cache.h"
#include "common/base/files.h"
#include "common/base/terminal_text.h"
#include "common/nvcc/host_compiler_args.h"
#include "common/nvcc/nvcc_args.h"
#include "common/transport/tls_credentials.h"
#include "distcc_cuda/v1/launcher.grpc.pb.h"

namespace distcc_cuda::client {
namespace fs = std::filesystem;
namespace {

// A unit name from a source's file name: what ValidateUnitName accepts.
std::string UnitNameFor(const std::string& source) {
  std::string name = fs::path(source).filename().string();
  for (char& c : name) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' ||
              c == '@' || c == '=' || c == '-';
    if (!ok) c = '_';
  }
  if (name.empty() || name[0] == '.') name = "_" + name;
  if (name.size() > 200) name.resize(200);
  return name;
}

// A name for a call in messages, before (or without) parsing it.
std::string WhatIsCompiled(const std::vector<std::string>& arguments, const char* program) {
  std::string output;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    std::string extension = fs::path(argument).extension().string();
    if (!argument.empty() && argument[0] != '-' &&
        (extension == ".cu" || extension == ".cpp" || extension == ".cc" || extension == ".c" ||
         extension == ".cxx")) {
      return fs::path(argument).filename().string();
    }
    if ((argument == "-o" || argument == "--output-file") && i + 1 < arguments.size()) {
      output = fs::path(arguments[i + 1]).filename().string();
    }
  }
  if (!output.empty()) return output;
  return arguments.empty() ? program : absl::StrCat(program, " ", arguments[0]);
}

}  // namespace

LauncherDecision DecideWhereToCompile(const std::vector<std::string>& arguments,
                                      bool host_compiler) {
  LauncherDecision decision;
  decision.what = WhatIsCompiled(arguments, host_compiler ? "c++" : "nvcc");
  if (host_compiler && std::find(arguments.begin(), arguments.end(), "-c") == arguments.end()) {
    // Links, queries and preprocessing: said so, not as a refused option.
    decision.local_reason = "not a compile (no -c): a link, or a query";
    return decision;
  }
  absl::StatusOr<NvccCommand> command = ParseCompileArguments(
      host_compiler ? v1::UNIT_COMPILER_HOST_CXX : v1::UNIT_COMPILER_NVCC, arguments);
  if (!command.ok()) {
    decision.local_reason = std::string(command.status().message());
    return decision;
  }
  bool only_dependencies = false, with_compile = false, nonsystem = false, phony = false;
  std::string dependency_file;
  std::vector<std::pair<std::string, std::string>> targets;  // -MT or -MQ, and its value
  for (const NvccArgument& flag : command->dependency_flags) {
    const std::string& o = flag.option;
    if (o == "-M" || o == "--generate-dependencies") {
      only_dependencies = true;
    } else if (o == "-MM" || o == "--generate-nonsystem-dependencies") {
      only_dependencies = true;
    } else if (o == "-MD" || o == "--generate-dependencies-with-compile") {
      with_compile = true;
    } else if (o == "-MMD" || o == "--generate-nonsystem-dependencies-with-compile") {
      with_compile = true;
      nonsystem = true;
    } else if (o == "-MP" || o == "--generate-dependency-targets") {
      phony = true;
    } else if (o == "-MF" || o == "--dependency-output") {
      dependency_file = flag.value;
    } else if (o == "-MT" || o == "--dependency-target-name") {
      targets.emplace_back("-MT", flag.value);
    } else if (o == "-MQ") {
      targets.emplace_back("-MQ", flag.value);
    }
  }
  if (only_dependencies) {
    decision.local_reason = "-M/-MM write dependencies without compiling";
    return decision;
  }
  if (command->actions.size() != 1) {
    decision.local_reason = command->actions.empty()
                                ? "not a compile (no -c or -dc): a link, or a query"
                                : "more than one compile action";
    return decision;
  }
  const std::string& action = command->actions[0];
  if (action != "-c" && action != "--compile" && action != "-dc" && action != "--device-c") {
    decision.local_reason = absl::StrCat(action, " does not make an object");
    return decision;
  }
  if (command->sources.size() != 1) {
    decision.local_reason = absl::StrCat(command->sources.size(), " sources, not one");
    return decision;
  }
  const std::string& source = command->sources[0];
  if (host_compiler ? !IsHostSource(source) : fs::path(source).extension() != ".cu") {
    decision.local_reason =
        absl::StrCat(source, host_compiler ? " is not a C++ source (.cpp, .cc, .cxx, .c)"
                                           : " is not a CUDA source (.cu)");
    return decision;
  }
  if (command->output.empty()) {
    decision.local_reason = "no -o";
    return decision;
  }
  RemoteCompilePlan& plan = decision.plan;
  plan.name = UnitNameFor(source);
  plan.host_compiler = host_compiler;
  plan.flags = command->FlagArguments();
  // -dc stays among the flags; -c is added back when the unit is made.
  plan.action = action == "-c" || action == "--compile" ? "-c" : "";
  plan.source = source;
  plan.output = command->output;
  if (with_compile) {
    // The compilers' own defaults: the file beside the object, the object
    // as target.
    plan.dependency_file = dependency_file.empty()
                               ? fs::path(plan.output).replace_extension(".d").string()
                               : dependency_file;
    plan.nonsystem_dependencies = nonsystem;
    plan.dependency_arguments = {nonsystem ? "-MM" : "-M"};
    if (phony) plan.dependency_arguments.push_back("-MP");
    if (targets.empty()) targets.emplace_back("-MT", plan.output);
    for (const auto& [option, target] : targets) {
      plan.dependency_arguments.insert(plan.dependency_arguments.end(), {option, target});
    }
    plan.dependency_arguments.insert(plan.dependency_arguments.end(),
                                     {"-MF", plan.dependency_file});
  }
  decision.remote = true;
  return decision;
}

std::string LauncherPath() {
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  return error ? "" : self.string();
}

bool LooksLikeNvcc(const std::string& word) { return fs::path(word).filename() == "nvcc"; }

bool LooksLikeCompiler(const std::string& word) {
  return LooksLikeNvcc(word) || LooksLikeHostCompiler(word);
}

namespace {

// `word` (a bare program name) in `path`, skipping this program itself (a
// PATH entry that is a link to distcc-cuda); "" when it is not there.
std::string FindInPathButSelf(const std::string& word, const std::string& path) {
  std::error_code error;
  const fs::path self = fs::canonical(LauncherPath(), error);
  for (absl::string_view folder : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(folder, "/", word);
    if (access(candidate.c_str(), X_OK) != 0) continue;
    std::error_code ignored;
    if (!self.empty() && fs::canonical(candidate, ignored) == self) continue;  // ourselves
    return AbsolutePath(candidate);
  }
  return "";
}

}  // namespace

absl::StatusOr<std::string> ResolveRealNvcc(const std::string& word,
                                            const ClientEnvironment& environment) {
  if (absl::StrContains(word, '/')) {
    std::string path = AbsolutePath(word);
    if (access(path.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(word, " is not an executable nvcc"));
    }
    return path;
  }
  if (std::string found = FindInPathButSelf(word, environment.path); !found.empty()) return found;
  for (const std::string& candidate :
       {environment.cuda_home.empty() ? "" : environment.cuda_home + "/bin/nvcc",
        std::string("/usr/local/cuda/bin/nvcc")}) {
    if (!candidate.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(
      "no nvcc found in $PATH (leaving out distcc-cuda itself), $CUDA_HOME/bin or "
      "/usr/local/cuda/bin; name it: distcc-cuda /path/to/nvcc ARGS...");
}

std::string RealCompilerBehind(const std::string& argv0, const ClientEnvironment& environment) {
  if (!environment.launcher_cxx.empty()) return environment.launcher_cxx;
  if (absl::StrContains(argv0, '/')) {
    absl::StatusOr<std::string> named =
        ReadFile((fs::path(argv0).parent_path() / kRealCompilerFile).string());
    if (named.ok() && !absl::StripAsciiWhitespace(*named).empty()) {
      return std::string(absl::StripAsciiWhitespace(*named));
    }
  }
  return fs::path(argv0).filename().string();
}

absl::StatusOr<std::string> ResolveRealCompiler(const std::string& word,
                                                const ClientEnvironment& environment) {
  if (!LooksLikeHostCompiler(word)) return ResolveRealNvcc(word, environment);
  if (absl::StrContains(word, '/')) {
    std::string path = AbsolutePath(word);
    if (access(path.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(word, " is not an executable compiler"));
    }
    std::error_code error, ignored;
    const fs::path self = fs::canonical(LauncherPath(), error);
    if (error || fs::canonical(path, ignored) != self) return path;
    // The link `build --` makes as CXX, behind CMAKE_CXX_COMPILER_LAUNCHER
    // too (a build folder configured in a session): the compiler it names.
    const std::string behind = RealCompilerBehind(path, environment);
    if (behind != fs::path(path).filename().string() && behind != word) {
      return ResolveRealCompiler(behind, environment);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        word, " is distcc-cuda itself, not a compiler; name the real one (DISTCC_CUDA_CXX)"));
  }
  if (std::string found = FindInPathButSelf(word, environment.path); !found.empty()) return found;
  return absl::NotFoundError(absl::StrCat("no ", word,
                                          " found in $PATH (leaving out distcc-cuda itself); "
                                          "name it: distcc-cuda /path/to/",
                                          word, " ARGS..."));
}

std::string MissingFileNamedIn(absl::string_view compiler_errors) {
  constexpr absl::string_view kFatal = "fatal error: ";
  constexpr absl::string_view kMissing = ": No such file or directory";
  for (absl::string_view line : absl::StrSplit(compiler_errors, '\n')) {
    size_t at = line.find(kFatal);
    if (at == absl::string_view::npos || !absl::EndsWith(line, kMissing)) continue;
    line.remove_prefix(at + kFatal.size());
    line.remove_suffix(kMissing.size());
    if (!line.empty()) return std::string(line);
  }
  return "";
}

LauncherOutcome CompileOrRunHere(RemoteCompiler& compiler, const LauncherCall& call,
                                 const LauncherDecision& decision, const CancelToken* cancel,
                                 bool fallback_local) {
  LauncherOutcome outcome;
  v1::LauncherCompileReply& reply = outcome.reply;
  if (!decision.remote) {
    reply.set_run_locally(true);
    reply.set_reason(decision.local_reason);
    return outcome;
  }
  absl::StatusOr<RemoteCompileResult> compiled = compiler.Compile(call, decision.plan, cancel);
  const std::string missing = compiled.ok() && compiled->exit_code != 0
                                  ? MissingFileNamedIn(compiled->stderr_text)
                                  : std::string();
  if (!missing.empty()) {
    // The scan here found every header, so the worker lacking one is a gap
    // in what was shipped, not the user's error: the local compile decides.
    reply.set_run_locally(true);
    const std::string named = TerminalSafe(missing.substr(0, 200));
    const std::string& workspace = compiled->workspace;
    if (!workspace.empty() && absl::StartsWith(missing, workspace + "/")) {
      // An #include of the workspace's own file by its absolute path: the
      // workers have the workspace at the canonical root only.
      reply.set_reason(absl::StrCat(
          "the source names ", named, ", a file of its workspace ", TerminalSafe(workspace),
          ", by its absolute path, which the workers do not have (they compile the workspace at ",
          kCanonicalWorkspace,
          "); compiling here (include it through -I or a relative path, or build with "
          "--absolute-paths)"));
    } else {
      reply.set_reason(absl::StrCat("the worker found no ", named,
                                    ", which the include scan here did not list; "
                                    "compiling here (please report this with the compile line)"));
    }
    outcome.cluster_error = reply.reason();
    return outcome;
  }
  if (compiled.ok()) {
    reply.set_exit_code(compiled->exit_code);
    reply.set_stdout_text(compiled->stdout_text);
    reply.set_stderr_text(compiled->stderr_text);
    outcome.remote = std::move(*compiled);
    return outcome;
  }
  const absl::Status& status = compiled.status();
  if (absl::IsInvalidArgument(status)) {
    // Refused before anything left this machine, or the scan failed: the
    // real nvcc says what is wrong, as it would without distcc-cuda.
    reply.set_run_locally(true);
    reply.set_reason(std::string(status.message()));
    return outcome;
  }
  if (absl::IsCancelled(status)) {
    reply.set_exit_code(130);
    reply.set_stderr_text(absl::StrCat("distcc-cuda: ", status.message(), "\n"));
    return outcome;
  }
  if (fallback_local) {
    reply.set_run_locally(true);
    reply.set_reason(
        absl::StrCat("the cluster failed (", status.message(), "); DISTCC_CUDA_FALLBACK=local"));
    outcome.cluster_error = std::string(status.message());
    return outcome;
  }
  reply.set_exit_code(2);
  reply.set_stderr_text(
      absl::StrCat("distcc-cuda: ", decision.plan.source, ": ", status.message(), "\n"));
  outcome.cluster_error = std::string(status.message());
  return outcome;
}

namespace {

// Runs `call`'s real compiler here as a child while holding one of the
// embedded default's slots (HoldMachineSlot of `session`), so that the
// embedded worker starts no compile in its place; its exit code, 128 +
// the signal that killed it. Without the session's answer it runs anyway.
int RunHereHoldingSlot(v1::LauncherSession::Stub& session, const LauncherCall& call,
                       const std::string& reason, bool verbose) {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::HoldMachineSlotReply>> slot =
      session.HoldMachineSlot(&context, v1::HoldMachineSlotRequest());
  v1::HoldMachineSlotReply held;
  const bool holding = slot->Read(&held);
  if (verbose) {
    std::cerr << "distcc-cuda: compiling here with " << call.compiler
              << (holding ? ", in a slot of this machine" : "") << ": " << reason << "\n";
  }
  std::vector<char*> args = {const_cast<char*>(call.compiler.c_str())};
  for (const std::string& argument : call.arguments)
    args.push_back(const_cast<char*>(argument.c_str()));
  args.push_back(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    // The build tool's SIGTERM to the launcher reaches the compiler too.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    execv(call.compiler.c_str(), args.data());
    static constexpr char kCannot[] = "distcc-cuda: cannot run the compiler\n";
    (void)!write(STDERR_FILENO, kCannot, sizeof(kCannot) - 1);
    _exit(127);
  }
  int status = 0;
  if (child < 0) {
    std::cerr << "distcc-cuda: cannot start " << call.compiler << ": " << strerror(errno) << "\n";
    status = 127 << 8;
  } else {
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  context.TryCancel();
  (void)slot->Finish();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int RunLauncher(int argc, char** argv, const ClientEnvironment& environment) {
  const bool verbose = environment.verbose;
  const bool fallback_local = environment.fallback_local;
  absl::StatusOr<std::string> real = ResolveRealCompiler(argv[1], environment);
  if (!real.ok()) {
    std::cerr << "distcc-cuda: " << real.status().message() << "\n";
    return 2;
  }
  LauncherCall call;
  call.compiler = *real;
  call.host_compiler = LooksLikeHostCompiler(argv[1]);
  call.arguments.assign(argv + 2, argv + argc);
  call.working_directory = fs::current_path().string();
  auto run_here = [&](const std::string& reason) -> int {
    if (verbose)
      std::cerr << "distcc-cuda: compiling here with " << call.compiler << ": " << reason << "\n";
    std::vector<char*> args = {const_cast<char*>(call.compiler.c_str())};
    for (std::string& argument : call.arguments) args.push_back(argument.data());
    args.push_back(nullptr);
    execv(call.compiler.c_str(), args.data());
    std::cerr << "distcc-cuda: cannot run " << call.compiler << ": " << strerror(errno) << "\n";
    return 127;
  };
  auto deliver = [&](const v1::LauncherCompileReply& reply) -> int {
    if (reply.run_locally()) return run_here(reply.reason());
    std::cout << reply.stdout_text() << std::flush;
    std::cerr << reply.stderr_text() << std::flush;
    return reply.exit_code();
  };

  const std::string& session = environment.session;
  if (!session.empty()) {
    auto stub = v1::LauncherSession::NewStub(
        grpc::CreateChannel(session, grpc::InsecureChannelCredentials()));
    v1::LauncherCompileRequest request;
    request.set_nvcc(call.compiler);
    request.set_host_compiler(call.host_compiler);
    for (const std::string& argument : call.arguments) request.add_arguments(argument);
    request.set_working_directory(call.working_directory);
    grpc::ClientContext context;
    v1::LauncherCompileReply reply;
    grpc::Status status = stub->Compile(&context, request, &reply);
    if (status.ok()) {
      const int exit_code = reply.run_locally() && reply.hold_machine_slot()
                                ? RunHereHoldingSlot(*stub, call, reply.reason(), verbose)
                                : deliver(reply);
      // The caller has its answer; this process has nothing left to write.
      // Returning would tear the channel down first, joining gRPC's threads
      // (about 15 ms of every launched compile, measured).
      std::fflush(nullptr);
      _exit(exit_code);
    }
    std::string why = absl::StrCat("the build session at ", session, " did not answer (",
                                   status.error_message(), ")");
    if (fallback_local) return run_here(why + "; DISTCC_CUDA_FALLBACK=local");
    std::cerr << "distcc-cuda: " << why
              << "; is the `distcc-cuda build -- ...` that set DISTCC_CUDA_SESSION still "
                 "running? (DISTCC_CUDA_FALLBACK=local compiles here instead)\n";
    return 2;
  }
  const std::string& coordinator = environment.coordinator;
  if (coordinator.empty()) {
    return run_here(
        "no build session or cluster: run the build under `distcc-cuda build -- COMMAND`, or "
        "set DISTCC_CUDA_COORDINATOR");
  }
  LauncherDecision decision = DecideWhereToCompile(call.arguments, call.host_compiler);
  if (!decision.remote) return run_here(decision.local_reason);
  if (call.host_compiler) {
    // The toolchain is the nvcc's that the workers pin, with their g++.
    absl::StatusOr<std::string> nvcc = ResolveRealNvcc("nvcc", environment);
    if (!nvcc.ok()) return run_here(std::string(nvcc.status().message()));
    call.toolchain_nvcc = *nvcc;
  }
  auto tls = LoadTlsMaterial(environment.launcher_tls, PeerRole::kClient);
  if (!tls.ok()) {
    std::cerr << "distcc-cuda: " << tls.status().message()
              << " (DISTCC_CUDA_TLS_CA, DISTCC_CUDA_TLS_CERT, DISTCC_CUDA_TLS_KEY)\n";
    return 2;
  }
  const std::string state_dir = DefaultStateDir(environment);
  RemoteCompiler compiler(OpenChannel(coordinator, *tls), coordinator, 1,
                          ScanCache::FolderFor(state_dir, environment.scan_cache),
                          environment.nvcc_variables, state_dir);
  compiler.SetLayoutSettings({environment.absolute_paths, ""});
  LauncherOutcome outcome = CompileOrRunHere(compiler, call, decision, nullptr, fallback_local);
  if (verbose && outcome.remote) {
    std::cerr << "distcc-cuda: " << decision.plan.name << " compiled on " << outcome.remote->worker
              << (outcome.remote->cached ? " (cached)" : "") << "\n";
  }
  return deliver(outcome.reply);
}

}  // namespace distcc_cuda::client
