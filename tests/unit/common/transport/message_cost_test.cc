// SPDX-License-Identifier: Apache-2.0
#include "common/transport/message_cost.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

const google::protobuf::Descriptor& Request() { return *v1::SubmitBuildRequest::descriptor(); }

TEST(MessageCostTest, CountsTheFieldsOfTheMessageItself) {
  v1::SubmitBuildRequest request;
  request.set_build_name("attention");
  for (int i = 0; i < 3; ++i) request.add_units()->set_name("unit");
  request.add_instantiation_sets()->set_name("fwd");
  request.add_scan_micros(1);
  request.add_scan_micros(2);
  absl::StatusOr<MessageCost> cost = MeasureMessage(request.SerializeAsString(), Request());
  ASSERT_TRUE(cost.ok()) << cost.status();
  EXPECT_EQ(cost->fields[v1::SubmitBuildRequest::kBuildNameFieldNumber], 1);
  EXPECT_EQ(cost->fields[v1::SubmitBuildRequest::kUnitsFieldNumber], 3);
  EXPECT_EQ(cost->fields[v1::SubmitBuildRequest::kInstantiationSetsFieldNumber], 1);
  // Packed: one field on the wire.
  EXPECT_EQ(cost->fields[v1::SubmitBuildRequest::kScanMicrosFieldNumber], 1);
}

// The estimate is what parsing takes, near enough to judge a request by:
// within a factor of two of what the parsed message says it uses.
TEST(MessageCostTest, EstimatesTheMemoryOfTheParsedMessage) {
  v1::SubmitBuildRequest request;
  for (int i = 0; i < 1000; ++i) {
    v1::CompileUnit* unit = request.add_units();
    unit->set_name("attention_fwd_bf16_hdim128_causal_" + std::to_string(i));
    for (const char* argument : {"-O3", "-std=c++17", "-Iinclude/cutlass/include", "-c"}) {
      unit->add_arguments(argument);
    }
    v1::InputFile* input = unit->add_inputs();
    input->set_path("csrc/flash_attn/src/flash_fwd_hdim128_bf16_causal_sm80.cu");
    input->mutable_digest()->set_hash(std::string(64, 'a'));
    input->mutable_digest()->set_size_bytes(4096);
  }
  const std::string bytes = request.SerializeAsString();
  absl::StatusOr<MessageCost> cost = MeasureMessage(bytes, Request());
  ASSERT_TRUE(cost.ok()) << cost.status();
  v1::SubmitBuildRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  const int64_t used = static_cast<int64_t>(parsed.SpaceUsedLong());
  EXPECT_GT(cost->parsed_bytes, used / 2) << "used " << used;
  EXPECT_LT(cost->parsed_bytes, used * 2) << "used " << used;
  // Real units take a few times their size (coordinator/request_cost
  // allows eight).
  EXPECT_LT(cost->parsed_bytes, 5 * static_cast<int64_t>(bytes.size()));
}

// What issue 30 sent: empty units, two bytes each on the wire, a hundred
// times that parsed. The estimate sees it before anything is parsed.
TEST(MessageCostTest, EmptyUnitsCostFarMoreParsedThanSent) {
  v1::SubmitBuildRequest request;
  for (int i = 0; i < 10000; ++i) request.add_units();
  const std::string bytes = request.SerializeAsString();
  EXPECT_EQ(bytes.size(), 20000u);
  absl::StatusOr<MessageCost> cost = MeasureMessage(bytes, Request());
  ASSERT_TRUE(cost.ok()) << cost.status();
  EXPECT_EQ(cost->fields[v1::SubmitBuildRequest::kUnitsFieldNumber], 10000);
  EXPECT_GT(cost->parsed_bytes, 50 * static_cast<int64_t>(bytes.size()));
}

TEST(MessageCostTest, MalformedBytesAreRefused) {
  v1::SubmitBuildRequest request;
  request.set_build_name("attention");
  request.add_units()->set_name("unit");
  const std::string bytes = request.SerializeAsString();
  for (const std::string& bad : {bytes.substr(0, bytes.size() - 2), std::string("\x00\x01", 2),
                                 std::string("\x1a\xff\xff\xff\xff\x0f", 6)}) {
    absl::StatusOr<MessageCost> cost = MeasureMessage(bad, Request());
    EXPECT_EQ(cost.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(cost.status().message(), HasSubstr("not a well-formed"));
  }
  // A unit that says it is longer than what follows it.
  std::string cut = bytes;
  cut.resize(cut.size() - 1);
  EXPECT_FALSE(MeasureMessage(cut, Request()).ok());
  EXPECT_TRUE(MeasureMessage("", Request()).ok());
}

}  // namespace
}  // namespace distcc_cuda
