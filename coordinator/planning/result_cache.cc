// SPDX-License-Identifier: Apache-2.0
#include "coordinator/planning/result_cache.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda::coordinator {

ResultCache::ResultCache(std::string directory, const CasStore* cas,
                         const WorkerRevocations* revocations)
    : directory_(std::move(directory)), cas_(cas), revocations_(revocations) {}

std::string ResultCache::PathOf(const std::string& action_digest) const {
  return absl::StrCat(directory_, "/", action_digest.substr(0, 2), "/", action_digest);
}

std::optional<v1::TaskResult> ResultCache::Lookup(const std::string& action_digest) const {
  absl::StatusOr<std::string> bytes = ReadFile(PathOf(action_digest));
  if (!bytes.ok()) return std::nullopt;
  v1::TaskResult result;
  if (!result.ParseFromString(*bytes)) {
    spdlog::warn("ignoring unreadable cache entry {}", PathOf(action_digest));
    return std::nullopt;
  }
  if (revocations_ != nullptr && !result.producer().empty() &&
      revocations_->IsRevoked(result.producer())) {
    spdlog::warn("dropping cached result {}: its producer {} is revoked", action_digest,
                 result.producer());
    std::error_code ignored;
    std::filesystem::remove(PathOf(action_digest), ignored);
    return std::nullopt;
  }
  for (const auto& output : result.outputs()) {
    absl::Status verified = cas_->Verify(FromProto(output.digest()));
    if (!verified.ok()) {
      // An output lost or damaged: the entry is dropped and the unit
      // compiles again, rather than failing every build that would use it.
      spdlog::warn("dropping cached result {}: output {}: {}", action_digest, output.path(),
                   std::string(verified.message()));
      std::error_code ignored;
      std::filesystem::remove(PathOf(action_digest), ignored);
      return std::nullopt;
    }
  }
  return result;
}

void ResultCache::Record(const std::string& action_digest, const v1::TaskResult& result) {
  absl::Status written = WriteFileAtomically(PathOf(action_digest), result.SerializeAsString());
  if (!written.ok()) {
    spdlog::warn("cannot record result {}: {}", action_digest, written.ToString());
  }
}

std::string ResultCache::AliasPathOf(const std::string& alias) const {
  return absl::StrCat(directory_, "-aliases/", alias.substr(0, 2), "/", alias);
}

void ResultCache::RecordAlias(const std::string& alias, const std::string& action_digest) {
  absl::Status written = WriteFileAtomically(AliasPathOf(alias), action_digest);
  if (!written.ok()) spdlog::warn("cannot record alias {}: {}", alias, written.ToString());
}

std::optional<v1::TaskResult> ResultCache::LookupAlias(const std::string& alias) const {
  absl::StatusOr<std::string> action_digest = ReadFile(AliasPathOf(alias));
  if (!action_digest.ok() || !ValidateDigest(Digest{*action_digest, 0}).ok()) return std::nullopt;
  return Lookup(*action_digest);
}

void ResultCache::Forget(const std::string& action_digest) {
  std::error_code ignored;
  std::filesystem::remove(PathOf(action_digest), ignored);
}

int ResultCache::ForgetProducedBy(const std::string& producer) {
  int dropped = 0;
  std::error_code error;
  for (auto it = std::filesystem::recursive_directory_iterator(directory_, error);
       !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    if (!it->is_regular_file(error)) continue;
    absl::StatusOr<std::string> bytes = ReadFile(it->path().string());
    v1::TaskResult result;
    if (!bytes.ok() || !result.ParseFromString(*bytes) || result.producer() != producer) continue;
    std::error_code ignored;
    dropped += std::filesystem::remove(it->path(), ignored);
  }
  if (error) spdlog::warn("reading the result cache {}: {}", directory_, error.message());
  return dropped;
}

std::string ActionDigest(const std::string& toolchain_digest, const v1::CompileUnit& unit,
                         const Digest& inputs) {
  Sha256 sha;
  auto field = [&](absl::string_view text) {
    sha.Update(absl::StrCat(text.size(), ":"));
    sha.Update(text);
  };
  // v3: workers give every input one modification time (kMaterializedMtime),
  // which some internal device names depend on; results of v2 would not
  // merge with v3 parts of the same unit. v4: the inputs are named by the
  // root of their tree, not listed, so a unit that sends a tree is keyed
  // without expanding it. v5: clients send a unit's workspace at the
  // canonical root (client/plan/workspace_layout.h), so the same tree built from
  // any folder is one action; a v4 result, keyed by the client's own
  // folder, is not looked up again (one miss per unit after the upgrade).
  field("distcc-cuda action v5");
  field(toolchain_digest);
  // The host compiler's units are told apart from nvcc's; nvcc's keys stay
  // those of v4 before host compiles joined.
  if (unit.compiler() != v1::UNIT_COMPILER_NVCC) {
    field(absl::StrCat("compiler ", static_cast<int>(unit.compiler())));
  }
  // Where the inputs are mounted: nvcc hashes the source's absolute path
  // into internal symbol names, so the object depends on it. Clients put
  // the workspace at one canonical root, so this is the same everywhere
  // (and the client's own folder only with --absolute-paths).
  field(unit.workspace_root());
  field(unit.working_directory());
  for (const auto& argument : unit.arguments()) field(argument);
  field("outputs");
  for (const auto& output : unit.output_paths()) field(output);
  field("inputs");
  field(inputs.ToString());
  return sha.FinishHex();
}

}  // namespace distcc_cuda::coordinator
