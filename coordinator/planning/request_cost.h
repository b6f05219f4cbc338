// SPDX-License-Identifier: Apache-2.0
// What a client's request may cost the coordinator to parse, judged from
// its bytes before it is parsed (common/transport/message_cost): FindMissingBlobs and
// BatchUpdateBlobs arrive as raw bytes, and a build's plan blob (how a
// client sends a large part) is read as bytes, so that a small message of
// many empty elements is refused without ever becoming hundreds of
// megabytes of objects. SubmitBuild and AddUnits arrive as raw bytes too,
// judged and parsed on the planning executor.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/planning/build_limits.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace distcc_cuda::coordinator {

// Parsed, a request may take at most this many times its size in memory,
// plus kParsedBytesAllowance: real units (names, arguments, paths, digests)
// take two to five times their size; empty ones a hundred times, empty
// strings twenty.
inline constexpr int64_t kParsedBytesPerByte = 8;
inline constexpr int64_t kParsedBytesAllowance = int64_t{32} << 20;

// OK when `bytes`, a message of `type`, takes at most kParsedBytesPerByte
// times its size plus kParsedBytesAllowance parsed and, given `limits` (may
// be null), holds at most `limits->max_units` of its `units` and of its
// `instantiation_sets` (fields SubmitBuildRequest, AddUnitsRequest and
// BuildPlan have). RESOURCE_EXHAUSTED naming `what` and the limit
// otherwise; INVALID_ARGUMENT for bytes that are not such a message.
absl::Status CheckParseCost(absl::string_view bytes, const google::protobuf::Descriptor& type,
                            const BuildLimits* limits, absl::string_view what);

// The bytes of a request gRPC received.
std::string BytesOf(const grpc::ByteBuffer& buffer);

// `message` serialized, as gRPC sends it.
grpc::ByteBuffer SerializedBytes(const google::protobuf::Message& message);

// `bytes` parsed as `message`, once CheckParseCost allows it.
absl::Status ParseRequest(absl::string_view bytes, const BuildLimits* limits,
                          absl::string_view what, google::protobuf::Message& message);
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, const BuildLimits* limits,
                          absl::string_view what, google::protobuf::Message& message);

}  // namespace distcc_cuda::coordinator
