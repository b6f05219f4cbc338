// SPDX-License-Identifier: Apache-2.0
#include "client/stages/verify.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/nvcc/canonical_paths.h"
#include "common/nvcc/fatbin.h"
#include "common/nvcc/nvcc_args.h"
#include "common/process/sandbox.h"
#include "common/process/subprocess.h"
#include "common/process/task_tree.h"
#include "common/store/cas_store.h"
#include "common/store/digest.h"
#include "common/store/input_tree.h"

namespace distcc_cuda::client {
namespace {

// The images of `returned` that `local` lacks and the other way round, as
// "sm_100 cubin", for the message.
std::string DescribeDifference(const std::string& returned, const std::string& local) {
  absl::StatusOr<std::vector<DeviceImage>> theirs = ReadDeviceImagesFromBytes(returned, "returned");
  absl::StatusOr<std::vector<DeviceImage>> ours = ReadDeviceImagesFromBytes(local, "rebuilt");
  if (!theirs.ok())
    return absl::StrCat("the returned object's device code is unreadable: ",
                        theirs.status().message());
  if (!ours.ok())
    return absl::StrCat("the rebuilt object's device code is unreadable: ",
                        ours.status().message());
  std::vector<std::string> differing;
  for (const DeviceImage& image : *theirs) {
    if (std::find(ours->begin(), ours->end(), image) == ours->end()) {
      differing.push_back(absl::StrCat("the returned ", DescribeDeviceImage(image)));
    }
  }
  for (const DeviceImage& image : *ours) {
    if (std::find(theirs->begin(), theirs->end(), image) == theirs->end()) {
      differing.push_back(absl::StrCat("the rebuilt ", DescribeDeviceImage(image)));
    }
  }
  if (differing.empty()) return "the images are equal but their containers are not";
  return absl::StrCat(absl::StrJoin(differing, ", "), " found no equal on the other side");
}

}  // namespace

absl::StatusOr<int> ParseVerifySample(const std::string& text) {
  if (text.empty()) return 0;
  if (text == "all") return -1;
  int count = 0;
  if (!absl::SimpleAtoi(text, &count) || count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--verify=", text, " is not \"all\" or a number of units to rebuild here and compare"));
  }
  return count;
}

std::vector<size_t> PickVerifySample(size_t total, int count) {
  std::vector<size_t> picked;
  if (total == 0 || count == 0) return picked;
  size_t n = count < 0 ? total : std::min(total, static_cast<size_t>(count));
  for (size_t i = 0; i < n; ++i) {
    picked.push_back(n == 1 ? 0 : i * (total - 1) / (n - 1));
  }
  return picked;
}

absl::Status VerifyUnits(const std::vector<UnitToVerify>& units, CasClient& cas,
                         const std::string& nvcc, const std::string& work_dir, std::ostream& out) {
  if (units.empty()) return absl::OkStatus();
  SandboxOptions options;
  options.toolkit_root =
      std::filesystem::path(AbsolutePath(nvcc)).parent_path().parent_path().string();
  ASSIGN_OR_RETURN(std::unique_ptr<CasStore> store, CasStore::Open(work_dir + "/cas"));
  // The units came from the coordinator: their trees listed and the
  // worker's own checks, before anything of them runs here.
  std::vector<v1::CompileUnit> expanded;
  for (const UnitToVerify& verify : units) {
    v1::CompileUnit& unit = expanded.emplace_back(verify.unit);
    RETURN_IF_ERROR(Annotate(
        ExpandUnitInputs(
            unit, [&](const Digest& digest) { return cas.FetchThroughStore(digest, *store); }),
        absl::StrCat("verify: the input tree of unit ", unit.name())));
    RETURN_IF_ERROR(Annotate(ValidateCompileUnit(unit, SystemIncludePrefixes(options.toolkit_root)),
                             "verify: the coordinator sent a unit this machine will not run"));
  }
  // The sandbox user must reach the task folders: a state dir under a
  // private home folder is not reachable, so they go under /var/tmp then.
  const std::string fallback = absl::StrCat("/var/tmp/distcc-cuda-sandbox/",
                                            DigestOf(AbsolutePath(work_dir)).hash.substr(0, 16));
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox =
      Sandbox::Create(options, nvcc, {work_dir + "/tasks", fallback});
  if (!sandbox.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--verify rebuilds units in the sandbox the workers use, and this machine cannot make "
        "one: ",
        sandbox.status().message()));
  }
  out << "distcc-cuda: verify: rebuilding " << units.size()
      << " units here as the workers did, to compare their device code\n";
  for (size_t i = 0; i < units.size(); ++i) {
    const UnitToVerify& verify = units[i];
    const v1::CompileUnit& unit = expanded[i];
    absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(std::string task_dir, MakeTempDirectory((*sandbox)->task_root(), "verify-"));
    auto cleanup = [&] { RemoveAll(task_dir).IgnoreError(); };
    absl::StatusOr<TaskTree> task = TaskTree::Prepare(
        unit, task_dir, sandbox->get(),
        [&](const v1::InputFile& input, const std::string& destination) -> absl::Status {
          Digest digest = FromProto(input.digest());
          RETURN_IF_ERROR(cas.DownloadToStore(digest, *store));
          return store->Materialize(digest, destination, input.is_executable());
        });
    if (!task.ok()) {
      cleanup();
      return Annotate(task.status(), absl::StrCat("verify: unit ", unit.name()));
    }
    ProcessSpec compile;
    compile.argv = {nvcc};
    for (std::string& argument : ArgumentsInToolkit(unit, options.toolkit_root)) {
      compile.argv.push_back(std::move(argument));
    }
    compile.timeout = absl::Hours(1);
    absl::StatusOr<ProcessSpec> wrapped = (*sandbox)->Wrap(compile, task->ForSandbox());
    absl::StatusOr<ProcessResult> ran =
        wrapped.ok() ? RunProcess(*wrapped) : absl::StatusOr<ProcessResult>(wrapped.status());
    if (!ran.ok() || ran->exit_code != 0) {
      cleanup();
      if (!ran.ok()) return Annotate(ran.status(), absl::StrCat("verify: unit ", unit.name()));
      out << ran->stdout_text << ran->stderr_text;
      return absl::DataLossError(absl::StrCat(
          "verify: unit ", unit.name(), " compiled on worker ", verify.worker,
          " but fails to compile here (", DescribeTermination(*ran),
          ") with the same toolchain and inputs: the worker's result cannot be trusted"));
    }
    const std::string rebuilt = task_dir + "/rebuilt.o";
    absl::Status collected = task->CollectOutput(0, rebuilt);
    absl::StatusOr<std::string> local = collected.ok() ? ReadFile(rebuilt) : collected;
    absl::StatusOr<std::string> returned = ReadFile(verify.returned_object);
    cleanup();
    if (!local.ok()) return Annotate(local.status(), absl::StrCat("verify: unit ", unit.name()));
    if (!returned.ok()) {
      return Annotate(returned.status(), absl::StrCat("verify: unit ", unit.name()));
    }
    absl::StatusOr<std::string> ours = DeviceCodeSections(*local, "rebuilt");
    absl::StatusOr<std::string> theirs = DeviceCodeSections(*returned, verify.returned_object);
    if (!ours.ok()) return Annotate(ours.status(), absl::StrCat("verify: unit ", unit.name()));
    if (!theirs.ok() || *theirs != *ours) {
      return absl::DataLossError(absl::StrCat(
          "verify: unit ", unit.name(), ": the device code worker ", verify.worker,
          " returned differs from a rebuild here with the same toolchain and inputs (",
          theirs.ok() ? DescribeDifference(*returned, *local) : theirs.status().message(),
          "); the library was not linked. Rebuild without the coordinator's cached result "
          "(a fresh --state-dir on the coordinator) and take worker ",
          verify.worker, " out of the cluster until it is understood"));
    }
    out << "  verified " << unit.name() << " (" << verify.worker << "): device code identical, "
        << ours->size() << " bytes, rebuilt in "
        << absl::StrFormat("%.1f s", absl::ToDoubleSeconds(absl::Now() - start)) << "\n";
  }
  return absl::OkStatus();
}

}  // namespace distcc_cuda::client
