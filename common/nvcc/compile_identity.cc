// SPDX-License-Identifier: Apache-2.0
#include "common/nvcc/compile_identity.h"

#include <cctype>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/nvcc/fatbin.h"

namespace distcc_cuda {
namespace {

constexpr std::string_view kPrefixes[] = {"_INTERNAL_", "_GLOBAL__N__"};

bool IsIdentifierByte(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

}  // namespace

std::set<std::string> CompileIdentitiesIn(std::string_view bytes) {
  std::set<std::string> identities;
  for (std::string_view prefix : kPrefixes) {
    for (size_t at = bytes.find(prefix); at != std::string_view::npos;
         at = bytes.find(prefix, at + 1)) {
      // The mangled length right before the name: <digits> after N, Z or L
      // (_ZN39_INTERNAL_..., _ZL..., N..._GLOBAL__N__...). Digits after
      // anything else could belong to the name before, so such a match is
      // not read at all rather than read wrong.
      size_t digits = at;
      while (digits > 0 && absl::ascii_isdigit(static_cast<unsigned char>(bytes[digits - 1]))) {
        --digits;
      }
      if (digits == at || at - digits > 4 || digits == 0) continue;
      const char before = bytes[digits - 1];
      if (before != 'N' && before != 'Z' && before != 'L') continue;
      size_t length = 0;
      for (size_t i = digits; i < at; ++i) length = length * 10 + (bytes[i] - '0');
      if (length <= prefix.size() || bytes.size() - at < length) continue;
      std::string_view name = bytes.substr(at, length);
      bool plain = true;
      for (char c : name) plain = plain && IsIdentifierByte(c);
      if (!plain) continue;
      identities.insert(std::string(name.substr(prefix.size())));
    }
  }
  return identities;
}

absl::StatusOr<std::map<std::string, std::set<std::string>>> CompileIdentitiesByPlace(
    std::string_view elf_bytes, std::string_view name) {
  std::map<std::string, std::set<std::string>> places;
  ASSIGN_OR_RETURN(std::vector<DeviceImage> images, ReadDeviceImagesFromBytes(elf_bytes, name));
  for (const DeviceImage& image : images) {
    std::set<std::string> found = CompileIdentitiesIn(image.payload);
    if (!found.empty()) places[DescribeDeviceImage(image)].insert(found.begin(), found.end());
  }
  ASSIGN_OR_RETURN(std::string host, HostCodeOf(elf_bytes, name));
  std::set<std::string> found = CompileIdentitiesIn(host);
  if (!found.empty()) places["host code"] = std::move(found);
  return places;
}

absl::Status CheckOneCompileIdentity(std::string_view elf_bytes, std::string_view name) {
  ASSIGN_OR_RETURN(auto places, CompileIdentitiesByPlace(elf_bytes, name));
  std::map<std::string, std::vector<std::string>> where;  // identity -> places
  for (const auto& [place, identities] : places) {
    for (const std::string& identity : identities) where[identity].push_back(place);
  }
  if (where.size() <= 1) return absl::OkStatus();
  std::vector<std::string> lines;
  for (const auto& [identity, in] : where) {
    lines.push_back(absl::StrCat(identity, " (", absl::StrJoin(in, ", "), ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      std::string(name), " names internal device entities under ", where.size(),
      " compile identities where one compile has one: ", absl::StrJoin(lines, "; "),
      ". A GPU that loads one image would not find the names the host code registers"));
}

}  // namespace distcc_cuda
