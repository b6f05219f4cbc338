// SPDX-License-Identifier: Apache-2.0
#include "tests/support/bazel_client.h"

namespace distcc_cuda::testing {

std::vector<std::string> BazelRemoteBuild(const std::string& root, const std::string& executor,
                                          const std::string& instance) {
  return {kBazel, "--nohome_rc", "--nosystem_rc", "--noworkspace_rc",
          // What Debian's system rc would say, which --nosystem_rc drops.
          "--install_base=/usr/share/bazel", "--trust_install_base",
          "--output_user_root=" + root + "/bazel-root", "--output_base=" + root + "/bazel-base",
          "--batch", "--host_jvm_args=-Xmx512m", "build", "--color=no", "--curses=no",
          "--noshow_progress", "--symlink_prefix=/", "--remote_executor=" + executor,
          "--remote_instance_name=" + instance, "--spawn_strategy=remote",
          "--noremote_local_fallback", "--noremote_upload_local_results", "--remote_timeout=120s"};
}

std::string BazelOutput(const std::string& root, const std::string& name) {
  return root + "/bazel-base/execroot/distcc_cuda_bazel_e2e/bazel-out/k8-fastbuild/bin/" + name;
}

}  // namespace distcc_cuda::testing
