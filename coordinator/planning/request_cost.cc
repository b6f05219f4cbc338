// SPDX-License-Identifier: Apache-2.0
#include "coordinator/planning/request_cost.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/byte_size.h"
#include "common/transport/message_cost.h"

namespace distcc_cuda::coordinator {

absl::Status CheckParseCost(absl::string_view bytes, const google::protobuf::Descriptor& type,
                            const BuildLimits* limits, absl::string_view what) {
  absl::StatusOr<MessageCost> cost = MeasureMessage(bytes, type);
  if (!cost.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a ", type.name(), " message (", cost.status().message(), ")"));
  }
  for (const char* name : {"units", "instantiation_sets"}) {
    const google::protobuf::FieldDescriptor* field = type.FindFieldByName(name);
    if (field == nullptr || limits == nullptr) continue;
    auto count = cost->fields.find(field->number());
    if (count != cost->fields.end() && count->second > limits->max_units) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " holds ", count->second, " ", name, ", over the ", limits->max_units,
          " a build may have (--max-units-per-build of distcc-cuda-coordinator); it was not "
          "read. Split the build, or ask the operator to raise the limit"));
    }
  }
  const int64_t allowed =
      kParsedBytesPerByte * static_cast<int64_t>(bytes.size()) + kParsedBytesAllowance;
  if (cost->parsed_bytes > allowed) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " is ", FormatByteSize(bytes.size()), " but would take about ",
        FormatByteSize(cost->parsed_bytes), " of the coordinator's memory once read (at most ",
        FormatByteSize(allowed),
        " for a request of its size); it was not read. Units that say nothing (no name, no "
        "arguments) are what makes a request cost that much"));
  }
  return absl::OkStatus();
}

std::string BytesOf(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  bytes.reserve(buffer.Length());
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

grpc::ByteBuffer SerializedBytes(const google::protobuf::Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status ParseRequest(const grpc::ByteBuffer& buffer, const BuildLimits* limits,
                          absl::string_view what, google::protobuf::Message& message) {
  return ParseRequest(BytesOf(buffer), limits, what, message);
}

absl::Status ParseRequest(absl::string_view bytes, const BuildLimits* limits,
                          absl::string_view what, google::protobuf::Message& message) {
  if (absl::Status cost = CheckParseCost(bytes, *message.GetDescriptor(), limits, what);
      !cost.ok()) {
    return cost;
  }
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a ", message.GetDescriptor()->name(), " message"));
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda::coordinator
