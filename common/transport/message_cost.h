// SPDX-License-Identifier: Apache-2.0
// What parsing a serialized protobuf message would cost, read from its bytes
// without parsing it. A peer's request is a few bytes per element on the
// wire but a C++ object of a hundred bytes or more once parsed (700,000
// empty units: 1.4 MB sent, about 200 MB parsed), so a request's memory is
// judged here, by its schema, before anything is materialised.
#pragma once

#include <cstdint>
#include <map>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace distcc_cuda {

struct MessageCost {
  // Elements of each of the message's own fields, by field number (a
  // repeated field's count; 1 for a field set once).
  std::map<int, int64_t> fields;
  // About the memory the parsed message takes: every message object at its
  // generated size, every string with its heap block, every element of a
  // repeated field at 8 bytes more (a number, or a pointer in its array).
  int64_t parsed_bytes = 0;
};

// Reads `bytes` as a message of `type`, following nested messages by their
// descriptors (at most 64 deep). INVALID_ARGUMENT when they are not a
// well-formed message (truncated, a bad tag or length, too deep).
absl::StatusOr<MessageCost> MeasureMessage(absl::string_view bytes,
                                           const google::protobuf::Descriptor& type);

}  // namespace distcc_cuda
