// SPDX-License-Identifier: Apache-2.0
#include "common/base/status.h"

#include <string>

#include "distcc_cuda/v1/rpc_status.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StatusTest, MissingBlobsCrossTheWireAsAPreconditionFailure) {
  absl::Status missing = MissingBlobsError("input a.h is not in the store", {"blobs/ab/3"});
  ASSERT_TRUE(NamesMissingBlobs(missing));
  grpc::Status sent = ToGrpcStatus(missing);
  EXPECT_EQ(sent.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(sent.error_message(), "input a.h is not in the store");
  // As any gRPC client reads it: a google.rpc.Status with the failure.
  v1::RpcStatus details;
  ASSERT_TRUE(details.ParseFromString(sent.error_details()));
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/google.rpc.PreconditionFailure");
  v1::PreconditionFailure failure;
  ASSERT_TRUE(failure.ParseFromString(details.details(0).value()));
  ASSERT_EQ(failure.violations_size(), 1);
  EXPECT_EQ(failure.violations(0).type(), "MISSING");
  EXPECT_EQ(failure.violations(0).subject(), "blobs/ab/3");
  absl::Status received = FromGrpcStatus(sent);
  EXPECT_TRUE(absl::IsFailedPrecondition(received));
  EXPECT_TRUE(NamesMissingBlobs(received));
  EXPECT_TRUE(NamesMissingBlobs(sent));
}

TEST(StatusTest, AnotherPreconditionIsNotMissingBlobs) {
  absl::Status toolchain =
      PreconditionError("no connected worker has the build's toolchain nvcc 12.8",
                        kToolchainUnserved, {"toolchains/abc"});
  absl::Status received = FromGrpcStatus(ToGrpcStatus(toolchain));
  EXPECT_TRUE(absl::IsFailedPrecondition(received));
  EXPECT_TRUE(HasPreconditionFailure(received));
  EXPECT_FALSE(NamesMissingBlobs(received));
  // A plain FAILED_PRECONDITION (an older coordinator's) has no detail.
  absl::Status plain = FromGrpcStatus(ToGrpcStatus(absl::FailedPreconditionError("missing")));
  EXPECT_FALSE(HasPreconditionFailure(plain));
  EXPECT_FALSE(NamesMissingBlobs(plain));
  // A MISSING detail on another code is not missing blobs.
  absl::Status other(absl::StatusCode::kInternal, "x");
  other.SetPayload(kPreconditionFailureType,
                   *MissingBlobsError("m", {"blobs/ab/3"}).GetPayload(kPreconditionFailureType));
  EXPECT_FALSE(NamesMissingBlobs(other));
}

TEST(StatusTest, AnnotateKeepsTheTypedDetail) {
  absl::Status annotated = Annotate(MissingBlobsError("lacks it", {"blobs/ab/3"}), "unit u");
  EXPECT_EQ(annotated.message(), "unit u: lacks it");
  EXPECT_TRUE(NamesMissingBlobs(annotated));
}

TEST(StatusTest, APeersDetailsThatDoNotParseAreDropped) {
  for (const std::string& details :
       {std::string("\xff\xff\xff garbage", 12), std::string(5 << 20, 'a')}) {
    absl::Status received = FromGrpcStatus(
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "\x1b[2Jlacks", details));
    EXPECT_TRUE(absl::IsFailedPrecondition(received));
    EXPECT_FALSE(HasPreconditionFailure(received));
    EXPECT_THAT(std::string(received.message()), HasSubstr("lacks"));
    EXPECT_THAT(std::string(received.message()), Not(HasSubstr("\x1b")));
  }
  // A detail of a type it does not know is not taken for one it does.
  v1::RpcStatus details;
  details.set_code(9);
  google::protobuf::Any* any = details.add_details();
  any->set_type_url("type.googleapis.com/google.rpc.BadRequest");
  any->set_value("\x0a\x00", 2);
  absl::Status received = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "bad", details.SerializeAsString()));
  EXPECT_FALSE(HasPreconditionFailure(received));
}

}  // namespace
}  // namespace distcc_cuda
