// SPDX-License-Identifier: Apache-2.0
// What the client is told, taken once: the process environment it reads
// (main reads it with ClientEnvironment::Of and hands it down; nothing in
// the library calls getenv) and the settings that `build PLAN` and
// `build -- COMMAND` share (main fills them once from the flags).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/reapi/engine_channel.h"
#include "common/reapi/unit_action.h"
#include "common/transport/tls_credentials.h"

namespace distcc_cuda::client {

// NAME, VALUE pairs, in the order they are listed.
using EnvironmentVariables = std::vector<std::pair<std::string, std::string>>;

// The variables nvcc itself reads that change what a scan finds: a scan's
// question includes those set, and a host compiler named here decides how
// the scan runs (dependency_scan.cc).
inline constexpr const char* kNvccVariables[] = {"NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS",
                                                 "NVCC_CCBIN",         "CPATH",
                                                 "C_INCLUDE_PATH",     "CPLUS_INCLUDE_PATH"};

// The environment of the client's process, as far as it reads it.
struct ClientEnvironment {
  std::string path;       // PATH: where the launcher finds the real nvcc
  std::string cuda_home;  // CUDA_HOME: the pinned nvcc's default
  std::string cxx;        // CXX: the host C++ compiler a build tool runs
  // DISTCC_CUDA_CXX: the real host compiler behind the session's CXX (the
  // launcher, named as that compiler).
  std::string launcher_cxx;
  // XDG_CACHE_HOME and HOME: where the embedded default keeps its state.
  std::string xdg_cache_home;
  std::string home;
  std::string term;         // TERM: "dumb" gets no redrawn progress line
  std::string coordinator;  // DISTCC_CUDA_COORDINATOR: a cluster to use
  // DISTCC_CUDA_SESSION: the `build --` whose launcher this process is.
  std::string session;
  bool fallback_local = false;  // DISTCC_CUDA_FALLBACK=local
  bool verbose = false;         // DISTCC_CUDA_VERBOSE=1 (the launcher)
  bool absolute_paths = false;  // DISTCC_CUDA_ABSOLUTE_PATHS=1
  // DISTCC_CUDA_TLS_CA, _CERT and _KEY: the launcher's certificate.
  TlsFiles launcher_tls;
  // DISTCC_CUDA_SCAN_CACHE when set: the scan cache's folder, or "off".
  std::optional<std::string> scan_cache;
  // The kNvccVariables that are set, in that order.
  EnvironmentVariables nvcc_variables;
  // DISTCC_CUDA_TOOLKITS: where `distcc-cuda toolkit` installs toolkits.
  std::string toolkits;
  // VIRTUAL_ENV: the Python environment `uv pip` and an activated shell use.
  std::string virtual_env;

  // The environment `environ` holds (NAME=VALUE strings up to a null; a
  // name given twice counts as getenv would see it, the first).
  static ClientEnvironment Of(const char* const* environ);
};

// $XDG_CACHE_HOME/distcc-cuda, else $HOME/.cache/distcc-cuda: where the
// embedded default keeps its state when --state-dir does not say.
std::string DefaultStateDir(const ClientEnvironment& environment);

// $DISTCC_CUDA_TOOLKITS, else DefaultStateDir/toolkits: where `distcc-cuda
// toolkit` installs toolkits (client/toolkit/toolkit_store.h).
std::string DefaultToolkitDir(const ClientEnvironment& environment);

// Another Remote Execution API engine that runs the build's units
// (--remote-executor): the embedded coordinator plans, admits and retries
// them, and its worker sends each to the engine as an Action.
struct RemoteEngineSettings {
  EngineAddress address;
  std::string instance;   // --remote-instance
  EngineHeaders headers;  // --remote-header K=V, on every call
  // --remote-tls-ca, --remote-tls-cert and --remote-tls-key (grpcs:// only):
  // the engine's CA and the client certificate it asks for; nullopt: the
  // system's CAs and no certificate.
  std::optional<TlsMaterial> tls;
  EngineTlsFiles tls_files;        // the files it was read from, for messages
  MemoryProperty memory_property;  // --remote-memory-property NAME[:UNIT]
  int jobs = 32;                   // --remote-jobs: units on the engine at once
  // --remote-memory: the memory of the engine's largest worker; the
  // coordinator admits units against it and never reserves more for one.
  int64_t memory_bytes = int64_t{64} << 30;
};

// How `build PLAN` and `build -- COMMAND` reach their cluster.
struct ClusterSettings {
  std::string coordinator_address;  // empty: start the embedded default
  std::optional<TlsMaterial> tls;   // for coordinator_address
  absl::Duration connect_timeout = absl::Seconds(5);
  // The embedded default's (EmbeddedCluster::Start).
  std::string state_dir;
  std::string nvcc_path;         // also the client's own: scans, links, PYTORCH_NVCC
  int embedded_slots = 0;        // 0: the usable cores
  bool embedded_sandbox = true;  // false: --insecure-no-sandbox
  bool worker_in_background = false;
  // Set: the embedded default's units run on this engine, not here.
  std::optional<RemoteEngineSettings> remote;
};

// What both kinds of build take, besides their own: the cluster, the
// environment's part in a scan, the trace, the strictness of the GPU check.
struct CommonBuildOptions : ClusterSettings {
  // DISTCC_CUDA_SCAN_CACHE when set (a folder, or "off"); unset: the scan
  // cache lives in state_dir/scan (ScanCache::FolderFor).
  std::optional<std::string> scan_cache;
  // The environment's variables that are part of every scan's question.
  EnvironmentVariables nvcc_variables;
  // --trace: where to write the build's timeline (BuildTrace); empty: none.
  std::string trace_path;
  // --strict-arch: refuse, instead of warning, a unit no target GPU loads.
  bool strict_arch = false;
  // --absolute-paths (or DISTCC_CUDA_ABSOLUTE_PATHS=1): every file at its own
  // path on the workers, results keyed by it (client/plan/workspace_layout.h).
  bool absolute_paths = false;
  // What a toolkit that replaced the nvcc adds to the command's environment
  // (CUDA_HOME, PATH...: client/toolkit/build_toolkit.h); empty otherwise.
  EnvironmentVariables toolkit_environment;
};

}  // namespace distcc_cuda::client
