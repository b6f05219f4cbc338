// SPDX-License-Identifier: Apache-2.0
// What the client prints of a coordinator's answers, made safe for the
// user's terminal where it arrives (common/base/terminal_text.h): names, reasons,
// notes and messages. nvcc's own output (a unit's stdout and stderr) is
// the exception: it reaches the user byte for byte, as a local nvcc's would.
#pragma once

#include "distcc_cuda/v1/build.pb.h"

namespace distcc_cuda::client {

// Rewrites every text field of `event` that the client prints, except the
// result's stdout_text and stderr_text, with TerminalSafe.
void MakePrintable(v1::BuildEvent& event);

// The same for every text field of a cluster status.
void MakePrintable(v1::ClusterStatus& status);

}  // namespace distcc_cuda::client
