// SPDX-License-Identifier: Apache-2.0
#include "common/transport/message_cost.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/message.h"
#include "google/protobuf/wire_format_lite.h"

namespace distcc_cuda {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

constexpr int kMaxDepth = 64;
// A std::string and the heap block of one longer than its inline buffer.
constexpr int64_t kStringBytes = 32;
constexpr int64_t kInlineString = 15;
constexpr int64_t kHeapBlockOverhead = 16;

// The memory of an empty message object of `type` (its generated class).
int64_t ObjectBytes(const Descriptor& type) {
  const google::protobuf::Message* prototype =
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(&type);
  return prototype != nullptr ? static_cast<int64_t>(prototype->SpaceUsedLong()) : 64;
}

int64_t StringBytes(uint32_t length) {
  return kStringBytes + (length > kInlineString ? length + 1 + kHeapBlockOverhead : 0);
}

class Measurer {
 public:
  explicit Measurer(absl::string_view bytes)
      : input_(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size())),
        size_(static_cast<int64_t>(bytes.size())) {
    input_.SetRecursionLimit(kMaxDepth);
  }

  // Measures the message of `type` up to the current limit; its own fields'
  // counts go to `fields` (null for nested messages).
  bool Message(const Descriptor& type, int depth, std::map<int, int64_t>* fields) {
    if (depth > kMaxDepth) return false;
    while (true) {
      const uint32_t tag = input_.ReadTag();
      if (tag == 0) return input_.ConsumedEntireMessage();
      const int number = WireFormatLite::GetTagFieldNumber(tag);
      if (fields != nullptr) ++(*fields)[number];
      const FieldDescriptor* field = type.FindFieldByNumber(number);
      const bool delimited =
          WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
      if (field == nullptr || !delimited) {
        // A number: its room is in the object, or 8 bytes of a repeated one.
        if (field != nullptr && field->is_repeated()) parsed_bytes_ += 8;
        if (!WireFormatLite::SkipField(&input_, tag)) return false;
        continue;
      }
      uint32_t length = 0;
      if (!input_.ReadVarint32(&length) || !Holds(length)) return false;
      if (field->is_repeated()) parsed_bytes_ += 8;  // its pointer in the field's array
      if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
        parsed_bytes_ += ObjectBytes(*field->message_type());
        const CodedInputStream::Limit limit = input_.PushLimit(static_cast<int>(length));
        if (!Message(*field->message_type(), depth + 1, nullptr)) return false;
        input_.PopLimit(limit);
      } else {
        // A string or bytes, or packed numbers (8 bytes each, at most one
        // per byte sent).
        const bool text = field->type() == FieldDescriptor::TYPE_STRING ||
                          field->type() == FieldDescriptor::TYPE_BYTES;
        parsed_bytes_ += text ? StringBytes(length) : 8 * int64_t{length};
        if (!input_.Skip(static_cast<int>(length))) return false;
      }
    }
  }

  int64_t parsed_bytes() const { return parsed_bytes_; }

 private:
  // Whether `length` more bytes are there, in the bytes and in the message
  // being read (a nested message cut short is malformed, not ended).
  bool Holds(uint32_t length) {
    const int64_t left = size_ - input_.CurrentPosition();
    const int until_limit = input_.BytesUntilLimit();
    return length <= left && (until_limit < 0 || int64_t{length} <= until_limit);
  }

  CodedInputStream input_;
  const int64_t size_;
  int64_t parsed_bytes_ = 0;
};

}  // namespace

absl::StatusOr<MessageCost> MeasureMessage(absl::string_view bytes, const Descriptor& type) {
  MessageCost cost;
  Measurer measurer(bytes);
  if (bytes.size() > static_cast<size_t>(INT32_MAX) || !measurer.Message(type, 0, &cost.fields)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", bytes.size(), " bytes sent are not a well-formed ", type.full_name(),
        " message (truncated, a bad tag or length, or nested over ", kMaxDepth, " deep)"));
  }
  cost.parsed_bytes = ObjectBytes(type) + measurer.parsed_bytes();
  return cost;
}

}  // namespace distcc_cuda
