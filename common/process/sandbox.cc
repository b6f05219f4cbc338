// SPDX-License-Identifier: Apache-2.0
#include "common/process/sandbox.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/status.h"

namespace distcc_cuda {
namespace fs = std::filesystem;
namespace {

// The paths the mounts are planned over: system paths and the workspace
// root, as a tree of their components.
struct MountTrie {
  std::map<std::string, MountTrie> children;
  bool system = false;  // a system path ends here
  std::string source;   // system: where bwrap finds it (itself, or where it is staged)
  bool input = false;   // the workspace root is here
};

MountTrie* Insert(MountTrie& root, const std::string& path) {
  MountTrie* node = &root;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    node = &node->children[std::string(part)];
  }
  return node;
}

std::string Join(const std::string& folder, const std::string& name) {
  return folder == "/" ? "/" + name : folder + "/" + name;
}

std::set<std::string> Entries(const std::string& folder) {
  std::set<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    names.insert(it->path().filename().string());
  }
  return names;
}

// Emits the mounts for `dest` inside the sandbox, where the system offers
// `sys` (a path on this machine, or "") that bwrap finds at `source` (`sys`
// itself unless staged) and the input tree `in` ("" if none), with `node`
// the planned paths at or below `dest`.
absl::Status Plan(const std::string& dest, const std::string& sys, const std::string& source,
                  const std::string& in, const MountTrie* node, const std::string& tree,
                  std::vector<std::string>& out) {
  struct stat sys_info, in_info;
  bool has_sys = !sys.empty() && lstat(sys.c_str(), &sys_info) == 0;
  bool has_in = !in.empty() && lstat(in.c_str(), &in_info) == 0;
  bool deeper = node != nullptr && !node->children.empty();
  bool root = dest == "/";
  if (has_sys && has_in) {
    // The inputs never replace or add to the toolchain's files: a gcc, a
    // libc or a specs file of the submitter's would run as the compile.
    return absl::InvalidArgumentError(absl::StrCat(
        "the unit's files would lie among the system's at ", dest,
        "; inputs, working directory and outputs never lie in the toolchain's folders"));
  }
  if (!root && !deeper && !has_in) {
    if (!has_sys) return absl::OkStatus();  // a system path this machine lacks
    if (S_ISLNK(sys_info.st_mode)) {
      std::error_code error;
      fs::path target = fs::read_symlink(sys, error);
      if (!error) out.insert(out.end(), {"--symlink", target.string(), dest});
      return absl::OkStatus();
    }
    out.insert(out.end(), {"--ro-bind", source, dest});
    return absl::OkStatus();
  }
  if (!root && !deeper && !has_sys) {
    out.insert(out.end(), {"--bind", in, dest});
    return absl::OkStatus();
  }
  if (!root && has_in && !S_ISDIR(in_info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the unit's file ", dest, " lies where system folders are planned"));
  }
  // System paths lie below: a folder of the sandbox's own, filled entry by
  // entry (only the ancestors of system paths are merged, never the system
  // paths themselves).
  bool sys_dir = has_sys && S_ISDIR(sys_info.st_mode);
  bool in_dir = has_in && S_ISDIR(in_info.st_mode);
  if (!root) out.insert(out.end(), {"--dir", dest});
  std::set<std::string> names;
  if (sys_dir) names = Entries(sys);
  if (in_dir) names.merge(Entries(in));
  if (node != nullptr) {
    for (const auto& [name, child] : node->children) names.insert(name);
  }
  for (const std::string& name : names) {
    const MountTrie* child = nullptr;
    if (node != nullptr) {
      auto it = node->children.find(name);
      if (it != node->children.end()) child = &it->second;
    }
    std::string child_dest = Join(dest, name);
    bool child_system = child != nullptr && child->system;
    std::string child_sys = sys_dir ? Join(sys, name) : (child_system ? child_dest : "");
    std::string child_source = sys_dir ? Join(source, name) : (child_system ? child->source : "");
    std::string child_in = in_dir ? Join(in, name) : "";
    if (child != nullptr && child->input) child_in = tree;
    // Only what was planned: a system folder's other entries come along
    // only inside a system path, an input folder's inside the input tree.
    if (child_sys.empty() && child_in.empty() && child == nullptr) continue;
    RETURN_IF_ERROR(Plan(child_dest, child_sys, child_source, child_in, child, tree, out));
  }
  return absl::OkStatus();
}

// `toolkit_root` and the folder it is a link to, unless under /usr.
void AddToolkitRoot(const std::string& toolkit_root, std::vector<std::string>& paths) {
  if (toolkit_root.empty()) return;
  std::error_code error;
  std::string real = fs::canonical(toolkit_root, error).string();
  for (const std::string& root : {toolkit_root, real}) {
    if (root.empty() || absl::StartsWith(root, "/usr/")) continue;
    if (std::find(paths.begin(), paths.end(), root) == paths.end()) paths.push_back(root);
  }
}

bool Normalised(const std::string& path) {
  return !path.empty() && path[0] == '/' && fs::path(path).lexically_normal().string() == path &&
         (path == "/" || path.back() != '/');
}

}  // namespace

std::vector<std::string> DefaultSystemPaths(const std::string& toolkit_root) {
  std::vector<std::string> paths;
  for (const char* path :
       {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
        "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"}) {
    struct stat info;
    if (lstat(path, &info) == 0) paths.push_back(path);
  }
  AddToolkitRoot(toolkit_root, paths);
  return paths;
}

absl::StatusOr<std::vector<std::string>> SandboxMountArguments(
    const std::vector<std::string>& system_paths, const SandboxTask& task,
    const std::map<std::string, std::string>& staged) {
  for (const std::string& path : system_paths) {
    if (!Normalised(path) || path == "/") {
      return absl::InvalidArgumentError(
          absl::StrCat("sandbox system path '", path, "' is not an absolute, normalised path"));
    }
  }
  for (const auto& [path, source] : staged) {
    if (std::find(system_paths.begin(), system_paths.end(), path) == system_paths.end() ||
        !Normalised(source)) {
      return absl::InvalidArgumentError(absl::StrCat("sandbox system path '", path, "' staged at '",
                                                     source,
                                                     "': not a system path, or not absolute"));
    }
  }
  for (const std::string& path :
       {task.workspace_root, task.working_directory, task.tree, task.temp}) {
    if (!Normalised(path)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sandbox path '", path, "' is not an absolute, normalised path"));
    }
  }
  MountTrie trie;
  for (const std::string& path : system_paths) {
    MountTrie* node = Insert(trie, path);
    node->system = true;
    auto staged_at = staged.find(path);
    node->source = staged_at == staged.end() ? path : staged_at->second;
  }
  Insert(trie, task.workspace_root)->input = true;
  std::vector<std::string> out = {"--proc", "/proc", "--dev", "/dev"};
  RETURN_IF_ERROR(
      Plan("/", "", "", task.workspace_root == "/" ? task.tree : "", &trie, task.tree, out));
  out.insert(out.end(), {"--bind", task.temp, kSandboxTemp, "--remount-ro", "/", "--chdir",
                         task.working_directory});
  return out;
}

namespace {

constexpr char kInstallBubblewrap[] =
    "install bubblewrap (apt-get install bubblewrap), or start the worker with "
    "--insecure-no-sandbox to compile without one";

}  // namespace

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::Create(const SandboxOptions& options,
                                                         const std::string& nvcc,
                                                         const std::vector<std::string>& task_roots,
                                                         const ProcessRunner& run) {
  std::unique_ptr<Sandbox> sandbox(new Sandbox());
  sandbox->options_ = options;
  RETURN_IF_ERROR(sandbox->FindBubblewrap());
  RETURN_IF_ERROR(sandbox->ChooseUser());
  sandbox->own_pid_namespace_ = sandbox->drop_to_user_ && PidNamespacesWork().ok();
  sandbox->system_paths_ = options.system_paths.empty() ? DefaultSystemPaths(options.toolkit_root)
                                                        : options.system_paths;
  for (const std::string& root : options.more_toolkit_roots) {
    AddToolkitRoot(root, sandbox->system_paths_);
  }
  absl::Status reachable = absl::FailedPreconditionError("no folder for task folders was given");
  for (const std::string& root : task_roots) {
    RETURN_IF_ERROR(MakeDirectories(root));
    // Searchable, not listable, by the sandbox user.
    if (sandbox->drop_to_user_) chmod(root.c_str(), 0711);
    reachable = sandbox->CheckReachable(root);
    if (reachable.ok()) {
      sandbox->task_root_ = AbsolutePath(root);
      break;
    }
  }
  RETURN_IF_ERROR(reachable);
  RETURN_IF_ERROR(sandbox->StageUnreachableSystemPaths());
  RETURN_IF_ERROR(sandbox->CheckToolkitReachable(options.toolkit_root));
  for (const std::string& root : options.more_toolkit_roots) {
    RETURN_IF_ERROR(sandbox->CheckToolkitReachable(root));
  }
  RETURN_IF_ERROR(sandbox->ProbeWith(nvcc, run));
  return sandbox;
}

absl::Status Sandbox::FindBubblewrap() {
  if (options_.bwrap.find('/') != std::string::npos) {
    bwrap_path_ = options_.bwrap;
  } else {
    for (const char* folder : {"/usr/bin", "/usr/local/bin", "/bin"}) {
      std::string candidate = Join(folder, options_.bwrap);
      if (access(candidate.c_str(), X_OK) == 0) {
        bwrap_path_ = candidate;
        break;
      }
    }
  }
  if (bwrap_path_.empty() || access(bwrap_path_.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no bubblewrap (", options_.bwrap, ") to sandbox compiles; ", kInstallBubblewrap));
  }
  ProcessSpec version;
  version.argv = {bwrap_path_, "--version"};
  version.timeout = absl::Seconds(10);
  ASSIGN_OR_RETURN(ProcessResult said, RunProcess(version));
  version_ = std::string(absl::StripAsciiWhitespace(said.stdout_text));
  return absl::OkStatus();
}

absl::Status Sandbox::ChooseUser() {
  if (geteuid() != 0) {
    uid_ = geteuid();
    gid_ = getegid();
    user_name_ = "this worker's user";
    return absl::OkStatus();
  }
  drop_to_user_ = true;
  std::vector<std::string> candidates =
      options_.user.empty() ? std::vector<std::string>{"distcc-cuda-sandbox", "nobody"}
                            : std::vector<std::string>{options_.user};
  bool found = false;
  for (const std::string& name : candidates) {
    struct passwd entry, *result = nullptr;
    std::vector<char> buffer(16384);
    uint32_t number;
    if (absl::SimpleAtoi(name, &number)) {
      getpwuid_r(number, &entry, buffer.data(), buffer.size(), &result);
      if (result == nullptr) {
        uid_ = number;
        gid_ = number;
        user_name_ = name;
        found = true;
        break;
      }
    } else {
      getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &result);
    }
    if (result != nullptr) {
      uid_ = result->pw_uid;
      gid_ = result->pw_gid;
      user_name_ = result->pw_name;
      found = true;
      break;
    }
  }
  if (!found) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sandbox user '", absl::StrJoin(candidates, "' or '"),
        "' does not exist; create it (useradd --system distcc-cuda-sandbox) or name one with "
        "--sandbox-user"));
  }
  if (uid_ == 0) {
    return absl::InvalidArgumentError(
        "--sandbox-user must not be root: the sandbox exists to take root away from nvcc");
  }
  return absl::OkStatus();
}

absl::StatusOr<ProcessResult> Sandbox::RunAlone(const ProcessSpec& program,
                                                const std::string& toolkit_root,
                                                const ProcessRunner& run) const {
  // An empty tree and temp folder of its own, like a task's, gone after.
  ASSIGN_OR_RETURN(std::string probe, MakeTempDirectory(task_root_, "sandbox-probe-"));
  SandboxTask task{probe + "/tree", "/run/distcc-cuda-probe", probe + "/tmp",
                   "/run/distcc-cuda-probe"};
  absl::Status made = MakeDirectories(task.tree);
  if (made.ok()) made = MakeDirectories(task.temp);
  if (made.ok()) made = GrantReach(probe);
  if (made.ok()) made = GrantWrite(task.temp);
  absl::StatusOr<ProcessSpec> wrapped = made.ok() ? Wrap(program, task, toolkit_root) : made;
  absl::StatusOr<ProcessResult> ran =
      wrapped.ok() ? run(*wrapped) : absl::StatusOr<ProcessResult>(wrapped.status());
  RemoveAll(probe).IgnoreError();
  return ran;
}

absl::Status Sandbox::ProbeWith(const std::string& nvcc, const ProcessRunner& run) {
  // The proof: nvcc --version inside a sandbox like a task's.
  ProcessSpec spec;
  spec.argv = {nvcc, "--version"};
  spec.timeout = absl::Seconds(60);
  absl::StatusOr<ProcessResult> ran = RunAlone(spec, "", run);
  if (!ran.ok() && !staged_.empty()) {
    // Most likely the bind before bwrap (ProcessSpec::binds) was refused.
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot run a sandbox (", ran.status().message(), "): ", staged_.begin()->first,
        " lies under a folder the sandbox user ", user_name_,
        " cannot search, and binding it elsewhere needs a mount namespace (CAP_SYS_ADMIN); "
        "make its folders searchable (chmod o+x) or move it under one that is"));
  }
  if (!ran.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run a sandbox (", ran.status().message(), "); ", kInstallBubblewrap));
  }
  if (ran->exit_code != 0 || ran->stdout_text.find("release") == std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nvcc --version failed inside the sandbox (", DescribeTermination(*ran),
        "): ", ran->stderr_text,
        "; the kernel may refuse unprivileged user namespaces (sysctl "
        "kernel.unprivileged_userns_clone / user.max_user_namespaces), or a container's seccomp "
        "or AppArmor profile refuses them (see deploy/README.md); ",
        kInstallBubblewrap));
  }
  return absl::OkStatus();
}

absl::Status Sandbox::StageUnreachableSystemPaths() {
  if (!drop_to_user_) return absl::OkStatus();
  const std::string staging = Join(task_root_, "sandbox-system");
  // What an earlier run staged, perhaps for other paths. Only ever mounted
  // on in a compile's own mount namespace, never here.
  RETURN_IF_ERROR(RemoveAll(staging));
  for (size_t i = 0; i < system_paths_.size(); ++i) {
    const std::string& path = system_paths_[i];
    struct stat info;
    // A link is recreated as a link inside: bwrap never reads it.
    if (lstat(path.c_str(), &info) != 0 || S_ISLNK(info.st_mode)) continue;
    ASSIGN_OR_RETURN(std::string blocker,
                     FirstUnsearchable(fs::path(path).parent_path().string(), ""));
    if (blocker.empty()) continue;
    std::string at = absl::StrCat(staging, "/", i);
    absl::Status made = MakeDirectories(S_ISDIR(info.st_mode) ? at : staging);
    if (made.ok() && !S_ISDIR(info.st_mode)) made = WriteFileAtomically(at, "");
    RETURN_IF_ERROR(made);
    staged_[path] = at;
  }
  // Searchable, not listable, by the sandbox user; writable by root alone.
  if (!staged_.empty() && chmod(staging.c_str(), 0711) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot restrict ", staging));
  }
  return absl::OkStatus();
}

absl::Status Sandbox::CheckToolkitReachable(const std::string& toolkit_root) const {
  if (toolkit_root.empty()) return absl::OkStatus();
  std::string bin = toolkit_root + "/bin";
  std::error_code error;
  std::string real = fs::canonical(bin, error).string();
  if (error) real = AbsolutePath(bin);
  // Inside, the folders above a staged system path are the sandbox's own:
  // only those from the staged path down are the machine's.
  std::string top;
  for (const auto& [path, at] : staged_) {
    if ((real == path || absl::StartsWith(real, path + "/")) && path.size() > top.size()) {
      top = path;
    }
  }
  ASSIGN_OR_RETURN(std::string blocker, FirstUnsearchable(real, top));
  if (blocker.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the toolkit is out of the sandbox's reach: the sandbox user ", user_name_, " cannot reach ",
      real, ": ", blocker, " is not searchable by it; make it so (chmod o+rx ", blocker,
      ") or install the toolkit where it can read it"));
}

absl::StatusOr<ProcessSpec> Sandbox::Wrap(const ProcessSpec& compile, const SandboxTask& task,
                                          const std::string& task_toolkit_root) const {
  ASSIGN_OR_RETURN(std::vector<std::string> mounts,
                   SandboxMountArguments(system_paths_, task, staged_));
  ProcessSpec wrapped = compile;
  wrapped.argv = {bwrap_path_, "--unshare-all",
                  // The compile is the namespace's first process: bwrap then
                  // waits for it itself, so its CPU time and peak memory
                  // reach our wait4 (with bwrap's own init in between they
                  // do not), and nvcc's temporary names (tmpxft_<pid>) are
                  // the same in every sandbox.
                  "--as-pid-1", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                  "--hostname", "distcc-cuda-sandbox"};
  // bwrap's --die-with-parent arms the sandboxed process's death signal only
  // at the end of its set-up: a worker killed outright before then takes
  // bwrap with it (ProcessSpec's death signal) but not that process, which
  // goes on to run the compile. As process 1 of a namespace of its own, bwrap
  // takes everything in it along when it dies, the sandbox's nested one too.
  wrapped.new_pid_namespace = own_pid_namespace_;
  if (drop_to_user_) {
    // Unprivileged bwrap maps its own user only; inside it keeps the same id.
    wrapped.run_as = ProcessSpec::Identity{uid_, gid_};
    // Bound by the child while it is still root, where bwrap run as the
    // sandbox user finds them (StageUnreachableSystemPaths).
    for (const auto& [path, at] : staged_) wrapped.binds.push_back({path, at, true});
  }
  wrapped.argv.insert(wrapped.argv.end(), mounts.begin(), mounts.end());
  wrapped.argv.push_back("--");
  wrapped.argv.insert(wrapped.argv.end(), compile.argv.begin(), compile.argv.end());
  // Not /usr/local/bin: a workspace may lie there.
  std::string path = "/usr/bin:/bin";
  const std::string& toolkit_root =
      task_toolkit_root.empty() ? options_.toolkit_root : task_toolkit_root;
  if (!toolkit_root.empty()) path = absl::StrCat(toolkit_root, "/bin:", path);
  wrapped.inherit_environment = false;
  wrapped.environment = {
      {"PATH", path}, {"TMPDIR", kSandboxTemp}, {"HOME", kSandboxTemp}, {"LANG", "C.UTF-8"}};
  // bwrap enters the working directory itself; it starts in a folder it can
  // reach.
  wrapped.working_directory = "/";
  return wrapped;
}

absl::Status Sandbox::GrantWrite(const std::string& folder) const {
  if (drop_to_user_ && chown(folder.c_str(), uid_, gid_) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot give ", folder, " to the sandbox user"));
  }
  if (chmod(folder.c_str(), 0755) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", folder, " to the sandbox"));
  }
  return absl::OkStatus();
}

absl::Status Sandbox::GrantReach(const std::string& folder) const {
  if (drop_to_user_ && chown(folder.c_str(), 0, gid_) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot give ", folder, " to the sandbox group"));
  }
  if (chmod(folder.c_str(), drop_to_user_ ? 0750 : 0700) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot restrict ", folder));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Sandbox::FirstUnsearchable(const std::string& folder,
                                                       const std::string& top) const {
  if (!drop_to_user_) return std::string();
  fs::path path = fs::path(AbsolutePath(folder)).lexically_normal();
  for (fs::path at = path; !at.empty(); at = at.parent_path()) {
    struct stat info;
    if (stat(at.c_str(), &info) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot look at ", at.string()));
    }
    bool reach = (info.st_mode & S_IXOTH) || (info.st_uid == uid_ && (info.st_mode & S_IXUSR)) ||
                 (info.st_gid == gid_ && (info.st_mode & S_IXGRP));
    if (!reach) return at.string();
    if (at.string() == top || at == at.parent_path()) break;
  }
  return std::string();
}

absl::Status Sandbox::CheckReachable(const std::string& folder) const {
  ASSIGN_OR_RETURN(std::string blocker, FirstUnsearchable(folder, ""));
  if (blocker.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the sandbox user ", user_name_, " cannot reach ",
      fs::path(AbsolutePath(folder)).lexically_normal().string(), ": ", blocker,
      " is not searchable by it; choose a --work-dir whose folders are (e.g. under /var/tmp)"));
}

std::string Sandbox::Describe() const {
  return absl::StrCat(version_.empty() ? "bubblewrap" : version_,
                      ": user, mount, pid, ipc, net, uts namespaces; compiles as ", user_name_,
                      " (", uid_, ")",
                      own_pid_namespace_ ? ""
                                         : "; a compile starting as the worker is killed outright "
                                           "may outlive it (bwrap gets no PID namespace of its "
                                           "own without root)");
}

}  // namespace distcc_cuda
