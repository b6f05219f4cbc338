// SPDX-License-Identifier: Apache-2.0
#include "client/plan/options.h"

#include <map>

#include "absl/strings/string_view.h"

namespace distcc_cuda::client {

ClientEnvironment ClientEnvironment::Of(const char* const* environ) {
  std::map<std::string, std::string> all;
  for (const char* const* entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    absl::string_view text(*entry);
    size_t equals = text.find('=');
    if (equals == absl::string_view::npos) continue;
    all.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  auto value = [&all](const std::string& name) {
    auto it = all.find(name);
    return it == all.end() ? std::string() : it->second;
  };
  ClientEnvironment environment;
  environment.path = value("PATH");
  environment.cuda_home = value("CUDA_HOME");
  environment.cxx = value("CXX");
  environment.launcher_cxx = value("DISTCC_CUDA_CXX");
  environment.xdg_cache_home = value("XDG_CACHE_HOME");
  environment.home = value("HOME");
  environment.term = value("TERM");
  environment.coordinator = value("DISTCC_CUDA_COORDINATOR");
  environment.session = value("DISTCC_CUDA_SESSION");
  environment.fallback_local = value("DISTCC_CUDA_FALLBACK") == "local";
  environment.verbose = value("DISTCC_CUDA_VERBOSE") == "1";
  environment.absolute_paths = value("DISTCC_CUDA_ABSOLUTE_PATHS") == "1";
  environment.launcher_tls = {value("DISTCC_CUDA_TLS_CA"), value("DISTCC_CUDA_TLS_CERT"),
                              value("DISTCC_CUDA_TLS_KEY")};
  if (all.count("DISTCC_CUDA_SCAN_CACHE") > 0 && !value("DISTCC_CUDA_SCAN_CACHE").empty()) {
    environment.scan_cache = value("DISTCC_CUDA_SCAN_CACHE");
  }
  environment.toolkits = value("DISTCC_CUDA_TOOLKITS");
  environment.virtual_env = value("VIRTUAL_ENV");
  for (const char* name : kNvccVariables) {
    auto it = all.find(name);
    if (it != all.end()) environment.nvcc_variables.emplace_back(name, it->second);
  }
  return environment;
}

std::string DefaultStateDir(const ClientEnvironment& environment) {
  if (!environment.xdg_cache_home.empty()) return environment.xdg_cache_home + "/distcc-cuda";
  return environment.home + "/.cache/distcc-cuda";
}

std::string DefaultToolkitDir(const ClientEnvironment& environment) {
  if (!environment.toolkits.empty()) return environment.toolkits;
  return DefaultStateDir(environment) + "/toolkits";
}

}  // namespace distcc_cuda::client
