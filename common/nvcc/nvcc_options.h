// SPDX-License-Identifier: Apache-2.0
// distcc-cuda's allowlist of nvcc's options: every option a compile unit may
// carry, how its value is written and a validator for the value. An option
// that is not listed is refused; so is one listed as forbidden, with the
// reason. Which files the paths name is checked separately (PathPolicy in
// nvcc_args.h): this table checks only the form of each value.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace distcc_cuda {

// What the value of an option is.
enum class NvccValueKind {
  kNone,        // a switch: -c, -G, --use_fast_math
  kText,        // a value that names no file: -O3, -DNAME, -gencode ...
  kInputPath,   // files or folders read by the compiler: -I, -include
  kOutputPath,  // a file written by the compiler: -o
  kDependency,  // make-style dependency output, dropped for remote compiles
  kForbidden,   // never runs on a worker (`why` says why)
};

// Checks the value of one option; INVALID_ARGUMENT saying what is wrong.
using NvccValueCheck = absl::Status (*)(absl::string_view option, absl::string_view value);

struct NvccOptionSpec {
  NvccValueKind kind = NvccValueKind::kNone;
  bool allows_joined = false;   // -Ifoo, -DNAME, -O3: single-dash short options
  bool takes_value = false;     // the value is the next argument (or after '=')
  bool compile_action = false;  // -c, -dc, -cubin, -ptx, -fatbin: what the compile makes
  // A forbidden option that is fine for nvcc on the user's own machine (a
  // link, a preprocess, --version): the launcher runs such commands locally.
  bool local_only = false;
  NvccValueCheck check = nullptr;  // for options with a value
  const char* why = "";            // for kForbidden
};

// The spec of `name` as written ("-arch", "--gpu-architecture"), or nullptr
// if nvcc's option is not in the model (and therefore refused).
const NvccOptionSpec* FindNvccOption(absl::string_view name);

// The option `argument` starts with when it is written joined ("-Iinc" ->
// "-I"), or nullptr. Only options with allows_joined qualify.
const NvccOptionSpec* FindJoinedNvccOption(absl::string_view argument, std::string* name);

// The form checks the table uses, for callers that build arguments. A path
// is shell-inert and does not start with '@' or '-'; a list is split at
// unescaped commas, each piece a path.
absl::Status CheckNvccPath(absl::string_view option, absl::string_view path);
absl::Status CheckNvccPathList(absl::string_view option, absl::string_view value);
absl::Status CheckNvccDefinitions(absl::string_view option, absl::string_view value);

}  // namespace distcc_cuda
