// SPDX-License-Identifier: Apache-2.0
#include "client/unit_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/digest.h"

namespace distcc_cuda::client {
namespace {

using ::testing::HasSubstr;

v1::CompileUnit UnitIncluding(int unit, int headers) {
  v1::CompileUnit compile;
  compile.set_name(absl::StrCat("gemm_", unit));
  for (int i = 0; i < headers; ++i) {
    v1::InputFile* input = compile.add_inputs();
    input->set_path(absl::StrCat("include/cutlass/h", i, ".hpp"));
    *input->mutable_digest() = ToProto(DigestOf(absl::StrCat(i)));
  }
  v1::InputFile* source = compile.add_inputs();
  source->set_path(absl::StrCat("gemm_", unit, ".cu"));
  *source->mutable_digest() = ToProto(DigestOf(absl::StrCat("unit ", unit)));
  return compile;
}

// Each unit names its root; the folders every unit shares are uploaded once.
TEST(UnitRequestTest, UnitsThatShareHeadersShareTheirFolders) {
  WorkspaceFiles files;
  for (int unit = 0; unit < 5; ++unit) {
    v1::CompileUnit compile = UnitIncluding(unit, 100);
    ASSERT_TRUE(
        MoveIntoInputTree(*compile.mutable_inputs(), *compile.mutable_input_root(), files).ok());
    EXPECT_EQ(compile.inputs_size(), 0);
    EXPECT_TRUE(ValidateDigest(FromProto(compile.input_root())).ok());
  }
  // Five roots, one include/ and one include/cutlass/.
  EXPECT_EQ(files.folders.size(), 7u);
  EXPECT_EQ(files.AllBlobs().size(), 7u);
}

TEST(UnitRequestTest, ABuildTooLargeForOneMessageSaysWhatToDo) {
  v1::SubmitBuildRequest request;
  for (int unit = 0; unit < 2000; ++unit) {
    v1::CompileUnit* compile = request.add_units();
    compile->set_name(absl::StrCat("gemm_", unit));
    for (int i = 0; i < 100; ++i)
      compile->add_arguments(absl::StrCat("-DCUTLASS_OPTION_", i, "=1"));
  }
  EXPECT_TRUE(CheckSubmissionSize(request).ok()) << "about 5 MiB fits";
  for (int unit = 0; unit < 2000; ++unit) {
    v1::CompileUnit* compile = request.add_units();
    compile->set_name(absl::StrCat("more_", unit));
    for (int i = 0; i < 100; ++i)
      compile->add_arguments(absl::StrCat("-DCUTLASS_OPTION_", i, "=1"));
  }
  absl::Status status = CheckSubmissionSize(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("(4000 units, "));
  EXPECT_THAT(status.message(), HasSubstr("MiB of them nvcc arguments), over the 8 MiB"));
  EXPECT_THAT(status.message(), HasSubstr("build fewer units at once"));
}

}  // namespace
}  // namespace distcc_cuda::client
