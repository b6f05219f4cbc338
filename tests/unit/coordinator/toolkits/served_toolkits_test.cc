// SPDX-License-Identifier: Apache-2.0
// What `distcc-cuda-coordinator toolkit add` stores of a CUDA folder
// (coordinator/toolkits/served_toolkits.h): its compile part, not the math and
// profiling libraries, debuggers or Nsight; every file with --whole.
#include "coordinator/toolkits/served_toolkits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/store/toolkit_manifest.h"
#include "tests/support/test_paths.h"

namespace distcc_cuda::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ServedToolkitsTest, TheCompilePartIsWhatNvccAndTheRuntimeLinkUse) {
  for (const char* kept :
       {"bin/nvcc", "bin/nvcc.profile", "bin/ptxas", "bin/cudafe++", "bin/crt/link.stub",
        "nvvm/bin/cicc", "nvvm/libdevice/libdevice.10.bc", "nvvm/lib64/libnvvm.so.4",
        "include/cuda_runtime.h", "include/cuda/std/tuple", "cuda_cccl/include/cub/cub.cuh",
        "targets/x86_64-linux/include/cublas_v2.h", "lib64", "lib", "lib/libcudart.so.12",
        "lib64/libcudart_static.a", "targets/x86_64-linux/lib/libcudadevrt.a",
        "targets/x86_64-linux/lib/stubs/libcuda.so", "version.json"}) {
    EXPECT_TRUE(IsCompileToolkitPart(kept)) << kept;
  }
  for (const char* left :
       {"bin/cuda-gdb", "bin/ncu", "bin/nsys", "bin/compute-sanitizer", "lib64/libcublas.so.12",
        "lib/libcublasLt_static.a", "targets/x86_64-linux/lib/libcufft.so.11",
        "targets/x86_64-linux/lib/stubs/libcublas.so", "lib/cmake/CUDAToolkit/config.cmake",
        "nsight-compute-2025.1.0/ncu", "extras/CUPTI/lib64/libcupti.so", "libnvvp/nvvp",
        "compute-sanitizer/compute-sanitizer", "share/doc/README", "gds/tools/gdscheck"}) {
    EXPECT_FALSE(IsCompileToolkitPart(left)) << left;
  }
}

void WriteFile(const std::string& path, const std::string& text, bool runs = false) {
  ASSERT_TRUE(WriteFileAtomically(path, text).ok()) << path;
  if (runs) fs::permissions(path, fs::perms::owner_all);
}

// A CUDA folder as NVIDIA's installers lay it out, in small.
std::string MakeCudaFolder() {
  const std::string home = testing::NewTempDir("served-toolkits-") + "/cuda-13.2";
  WriteFile(home + "/bin/nvcc",
            "#!/bin/sh\necho 'Cuda compilation tools, release 13.2, V13.2.86'\n", true);
  WriteFile(home + "/bin/ptxas", "ptxas", true);
  WriteFile(home + "/bin/cuda-gdb", std::string(4096, 'g'), true);
  WriteFile(home + "/nvvm/bin/cicc", "cicc", true);
  WriteFile(home + "/targets/x86_64-linux/include/cuda_runtime.h", "#pragma once\n");
  WriteFile(home + "/targets/x86_64-linux/lib/libcudart.so.13.2.75", "cudart");
  WriteFile(home + "/targets/x86_64-linux/lib/libcublas.so.13.2.1", std::string(65536, 'b'));
  WriteFile(home + "/nsight-compute-2026.1/ncu", "ncu", true);
  fs::create_symlink("libcudart.so.13.2.75", home + "/targets/x86_64-linux/lib/libcudart.so");
  fs::create_symlink("libcublas.so.13.2.1", home + "/targets/x86_64-linux/lib/libcublas.so");
  fs::create_directory_symlink("targets/x86_64-linux/include", home + "/include");
  fs::create_directory_symlink("targets/x86_64-linux/lib", home + "/lib64");
  // Into a folder that is left out, and out of the toolkit altogether.
  fs::create_symlink("../nsight-compute-2026.1/ncu", home + "/bin/nvdisasm");
  fs::create_symlink("/usr/bin/true", home + "/bin/nvprune");
  return home;
}

TEST(ServedToolkitsTest, AddStoresTheCompilePartOnceAndEveryFileWithWhole) {
  const std::string home = MakeCudaFolder();
  const std::string state = testing::NewTempDir("served-state-");
  std::ostringstream said;
  absl::StatusOr<v1::ServedToolkit> added = AddServedToolkit(state, home, said);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->version(), "13.2.86");
  // nvcc, ptxas, cicc, the header and the runtime; no debugger, no cuBLAS,
  // no Nsight.
  EXPECT_EQ(added->files(), 5) << said.str();
  EXPECT_LT(added->bytes(), 4096);
  std::unique_ptr<CasStore> store = *CasStore::Open(state + "/cas");
  absl::StatusOr<std::string> manifest =
      ReadFile(store->PathOf(Digest{added->manifest().hash(), added->manifest().size_bytes()}));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_THAT(*manifest,
              AllOf(HasSubstr(" x bin/nvcc\n"), HasSubstr(" x nvvm/bin/cicc\n"),
                    HasSubstr("link targets/x86_64-linux/lib lib64\n"),
                    HasSubstr("link libcudart.so.13.2.75 targets/x86_64-linux/lib/libcudart.so\n"),
                    Not(HasSubstr("cublas")), Not(HasSubstr("cuda-gdb")), Not(HasSubstr("ncu")),
                    Not(HasSubstr("nvdisasm")), Not(HasSubstr("nvprune"))));
  // What was left out does not break the check a worker makes of its copy.
  ASSERT_TRUE(ParseToolkitManifest(*manifest).ok());

  // The same folder again: the same toolkit, listed once.
  std::ostringstream again;
  absl::StatusOr<v1::ServedToolkit> second = AddServedToolkit(state, home, again);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->manifest().hash(), added->manifest().hash());
  EXPECT_EQ(ReadServedToolkits(state)->size(), 1u);

  // --whole: everything the folder holds (a link out of it still refused).
  fs::remove(home + "/bin/nvprune");
  std::ostringstream whole_said;
  absl::StatusOr<v1::ServedToolkit> whole =
      AddServedToolkit(state, home, whole_said, ToolkitPart::kWhole);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->files(), 8);
  EXPECT_GT(whole->bytes(), 65536);
  EXPECT_EQ(ReadServedToolkits(state)->size(), 1u);  // it replaced the compile part
  fs::create_symlink("/usr/bin/true", home + "/bin/nvprune");
  EXPECT_THAT(AddServedToolkit(state, home, whole_said, ToolkitPart::kWhole).status().message(),
              HasSubstr("leads out of the toolkit"));
}

TEST(ServedToolkitsTest, AnNvccThatLeadsOutOfTheFolderIsRefused) {
  const std::string home = MakeCudaFolder();
  const std::string elsewhere = testing::NewTempDir("served-nvcc-") + "/nvcc";
  fs::rename(home + "/bin/nvcc", elsewhere);
  fs::create_symlink(elsewhere, home + "/bin/nvcc");
  std::ostringstream said;
  absl::StatusOr<v1::ServedToolkit> added =
      AddServedToolkit(testing::NewTempDir("served-state-"), home, said);
  EXPECT_EQ(added.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(added.status().message(), HasSubstr("bin/nvcc is not a file of the folder"));
}

}  // namespace
}  // namespace distcc_cuda::coordinator
