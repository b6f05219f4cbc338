// SPDX-License-Identifier: Apache-2.0
#include "coordinator/services/client_text.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"

namespace distcc_cuda::coordinator {
namespace {

// OK when `text`, the field `what`, is shown safely and within `limit`.
absl::Status CheckText(const std::string& what, const std::string& text, size_t limit) {
  if (text.size() > limit) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", text.size(),
                                                   " bytes; this coordinator takes at most ", limit,
                                                   "; shorten it"));
  }
  if (!IsTerminalSafe(text)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", TerminalSafe(text, false, 200),
        "' holds a control character, an escape sequence, a line break, a byte that is not "
        "UTF-8 or a bidirectional override (written out above as \\xNN); it would reach logs "
        "and other people's screens as it is, so it is refused: use printable text"));
  }
  return absl::OkStatus();
}

absl::Status CheckToolchain(const v1::ToolchainFingerprint& toolchain) {
  const std::pair<const char*, const std::string*> fields[] = {
      {"nvcc_release", &toolchain.nvcc_release()},
      {"nvcc_build", &toolchain.nvcc_build()},
      {"nvcc_version", &toolchain.nvcc_version()},
      {"nvcc_path", &toolchain.nvcc_path()},
      {"nvcc_sha256", &toolchain.nvcc_sha256()},
      {"cicc_sha256", &toolchain.cicc_sha256()},
      {"ptxas_sha256", &toolchain.ptxas_sha256()},
      {"cuda_version_header", &toolchain.cuda_version_header()},
      {"host_compiler", &toolchain.host_compiler()},
      {"digest", &toolchain.digest()},
  };
  for (const auto& [name, text] : fields) {
    RETURN_IF_ERROR(
        CheckText(absl::StrCat("the build's toolchain ", name), *text, kMaxDescriptionBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckSet(const v1::InstantiationSet& set) {
  RETURN_IF_ERROR(CheckText("an instantiation set's name", set.name(), kMaxSetNameBytes));
  const std::string where = absl::StrCat("instantiation set ", set.name());
  RETURN_IF_ERROR(CheckText(absl::StrCat(where, ": its unit_name_template"),
                            set.unit_name_template(), kMaxDescriptionBytes));
  RETURN_IF_ERROR(CheckText(absl::StrCat(where, ": its manifest_location"), set.manifest_location(),
                            kMaxDescriptionBytes));
  for (const v1::InstantiationAxis& axis : set.axes()) {
    RETURN_IF_ERROR(
        CheckText(absl::StrCat(where, ": an axis name"), axis.name(), kMaxSetNameBytes));
    for (const std::string& value : axis.values()) {
      RETURN_IF_ERROR(CheckText(absl::StrCat(where, ": a value of axis ", axis.name()), value,
                                kMaxDescriptionBytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckClientText(const v1::SubmitBuildRequest& request) {
  RETURN_IF_ERROR(CheckText("the build name", request.build_name(), kMaxBuildNameBytes));
  RETURN_IF_ERROR(CheckToolchain(request.toolchain()));
  for (const v1::InstantiationSet& set : request.instantiation_sets()) {
    RETURN_IF_ERROR(CheckSet(set));
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda::coordinator
