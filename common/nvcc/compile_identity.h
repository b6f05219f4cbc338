// SPDX-License-Identifier: Apache-2.0
// The compile identity nvcc's front end gives one compile. cudafe++ names
// the namespaces of internal device entities (static __device__ variables,
// kernels in anonymous namespaces, CCCL's internal customization points)
// after the source and, when a unit's only host functions are explicit
// template specializations, after nvcc's process id:
//   _INTERNAL_<path hash>_<length>_<file>_cu_<hash>_<pid>
//   _GLOBAL__N__<path hash>_<length>_<file>_cu_<hash>_<pid>
// The host code registers device variables by these names and the driver
// looks them up in whichever image it loads: a cubin, or PTX it compiles for
// a newer GPU. One compile uses one identity in all of them. An object
// merged from the parts of a split unit (SplitByArchitecture) is right only
// if every part's compile had the same identity.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace distcc_cuda {

// The identities (the text after `_INTERNAL_` or `_GLOBAL__N__`, as long as
// the mangled length before it says) named in `bytes`: PTX text, a cubin, or
// a host object's symbol and string tables.
std::set<std::string> CompileIdentitiesIn(std::string_view bytes);

// For the object `elf_bytes`: which identities each place names ("host
// code", "sm_100 cubin", "compute_100 ptx"), only places that name one.
absl::StatusOr<std::map<std::string, std::set<std::string>>> CompileIdentitiesByPlace(
    std::string_view elf_bytes, std::string_view name);

// OK if every device image and the host code of the object `elf_bytes` name
// at most one compile identity between them; otherwise FAILED_PRECONDITION
// naming `name`, each identity and where it is found.
absl::Status CheckOneCompileIdentity(std::string_view elf_bytes, std::string_view name);

}  // namespace distcc_cuda
