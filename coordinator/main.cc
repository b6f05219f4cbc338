// SPDX-License-Identifier: Apache-2.0
// distcc-cuda-coordinator: accepts builds and leases their units to workers.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "common/byte_size.h"
#include "common/command_line.h"
#include "common/signals.h"
#include "coordinator/coordinator.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:3633", "HOST:PORT to listen on for clients and workers");
ABSL_FLAG(std::string, state_dir, "", "folder for the content store and result cache (required)");
ABSL_FLAG(std::string, default_unit_memory, "2GiB",
          "peak memory predicted for a unit never measured and with no similar unit, per "
          "parallel compilation (-gencode targets run at once under --threads)");
ABSL_FLAG(int, default_unit_seconds, 60, "wall time predicted for such a unit");
ABSL_FLAG(std::string, admission, "memory",
          "memory: start a unit only where its predicted peak fits (the default); static: "
          "fill every worker slot regardless of memory, like ninja -j (for comparisons)");
ABSL_FLAG(int, heartbeat_timeout_s, 6,
          "drop a worker and re-queue its units after this many seconds "
          "without a heartbeat");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Accepts distcc-cuda builds and schedules their compile units on the "
      "workers that connect to it.\n"
      "Usage: distcc-cuda-coordinator --listen 0.0.0.0:3633 --state-dir DIR");
  distcc_cuda::ParseFlags(argc, argv, "coordinator");
  distcc_cuda::BlockTerminationSignals();
  distcc_cuda::coordinator::CoordinatorOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.scheduler.heartbeat_timeout = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_timeout_s));
  auto default_memory = distcc_cuda::ParseByteSize(absl::GetFlag(FLAGS_default_unit_memory));
  if (!default_memory.ok()) {
    std::cerr << "distcc-cuda-coordinator: --default-unit-memory: "
              << default_memory.status().message() << "\n";
    return 2;
  }
  options.prediction.peak_bytes = *default_memory;
  std::string admission = absl::GetFlag(FLAGS_admission);
  if (admission != "memory" && admission != "static") {
    std::cerr << "distcc-cuda-coordinator: --admission is 'memory' or 'static', not '" << admission
              << "'\n";
    return 2;
  }
  options.scheduler.memory_admission = admission == "memory";
  options.prediction.wall = absl::Seconds(absl::GetFlag(FLAGS_default_unit_seconds));
  auto coordinator = distcc_cuda::coordinator::Coordinator::Start(options);
  if (!coordinator.ok()) {
    std::cerr << "distcc-cuda-coordinator: " << coordinator.status().message() << "\n";
    return 1;
  }
  // Lets scripts started with port 0 learn the port.
  std::cout << "listening on " << (*coordinator)->address() << std::endl;
  int signal = distcc_cuda::WaitForTerminationSignal();
  spdlog::info("coordinator shutting down (signal {})", signal);
  return 0;
}
