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
// The same for at most `seconds`; 0 if none arrived.
int WaitForTerminationSignalFor(int seconds);

// Ends the process as if `signal` had killed it (its default action), so a
// shell or make running it sees an interrupted program (exit status 128 +
// signal) and stops too. Call after cleaning up.
[[noreturn]] void ExitBySignal(int signal);

}  // namespace distcc_cuda
