// SPDX-License-Identifier: Apache-2.0
// One compiler call of a build tool as the launcher receives it, and where it
// runs: the plan of a call that can compile on a worker, or why it runs
// here. The launcher decides (launcher.h); a remote compile carries it out
// (remote_compile.h).
#pragma once

#include <string>
#include <vector>

namespace distcc_cuda::client {

// One compiler call of a build tool: nvcc, or its host C++ compiler.
struct LauncherCall {
  std::string compiler;                // absolute path of the real compiler
  std::vector<std::string> arguments;  // without the compiler itself
  std::string working_directory;       // absolute
  bool host_compiler = false;          // `compiler` is the host C++ compiler (CXX)
  // The nvcc whose toolchain fingerprint (which names the host compiler
  // too) the compile is matched by; "" for an nvcc call: `compiler`.
  std::string toolchain_nvcc;

  const std::string& nvcc() const { return toolchain_nvcc.empty() ? compiler : toolchain_nvcc; }
};

// A call that can compile on a worker, and what the caller expects here.
struct RemoteCompilePlan {
  std::string name;                // the unit's name: the source's file name, made safe
  bool host_compiler = false;      // the arguments are the host C++ compiler's
  std::vector<std::string> flags;  // without -c/-dc, -o, the source and dependency options
  std::string action;              // "-c", or "" for -dc (which stays in `flags`)
  std::string source;              // as given
  std::string output;              // the -o value, as given
  // The dependency file a -MD/-MMD compile writes (as given, or the
  // output's path with .d), and the arguments that make nvcc's dependency
  // pass write exactly that file; both empty without -MD/-MMD.
  std::string dependency_file;
  std::vector<std::string> dependency_arguments;
  bool nonsystem_dependencies = false;  // -MMD: the file leaves system headers out
};

// Where a call runs: remote with a plan, or here with the reason why.
struct LauncherDecision {
  bool remote = false;
  RemoteCompilePlan plan;    // when remote
  std::string local_reason;  // when not: "a link", "-E preprocesses", ...
  std::string what;          // for people: the source's or output's file name
};

}  // namespace distcc_cuda::client
