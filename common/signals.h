// SPDX-License-Identifier: Apache-2.0
// Orderly shutdown on SIGINT/SIGTERM without async-signal-unsafe handlers:
// block the signals before any thread starts, then wait for one.
#pragma once

namespace distcc_cuda {

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts
// afterwards. Call first thing in main.
void BlockTerminationSignals();

// Waits until SIGINT or SIGTERM arrives and returns its number.
int WaitForTerminationSignal();

}  // namespace distcc_cuda
