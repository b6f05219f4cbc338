// SPDX-License-Identifier: Apache-2.0
// A toolkit a coordinator serves, fetched into a folder of this machine:
// how workers get a toolkit they lack and clients the cluster's toolkit
// (`distcc-cuda toolkit install RELEASE --coordinator`). What a coordinator
// says and sends is hostile until checked: its list, its manifest and its
// blobs, each bounded before the work it costs, written only inside the
// folder, and pinned by the manifest's digest where the operator says so.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/nvcc/cuda_release.h"
#include "common/store/blob_client.h"
#include "distcc_cuda/v1/cas.grpc.pb.h"

namespace distcc_cuda {

// A served toolkit asked for: a release ("13.2": the newest 13.2.x served;
// "13.2.86": that one), pinned or not to the SHA-256 of its manifest
// ("13.2@sha256:HEX"), the digest `distcc-cuda-coordinator toolkit list`
// prints. A pinned one is taken only with that manifest.
struct WantedToolkit {
  CudaRelease release;
  std::string pinned_hash;  // 64 hex digits; empty: not pinned
  // "13.2" or "13.2@sha256:HEX".
  std::string ToString() const;
};

// "13.2", "13.2.86", or either followed by "@sha256:" and 64 lowercase hex
// digits. INVALID_ARGUMENT saying the form otherwise.
absl::StatusOr<WantedToolkit> ParseWantedToolkit(absl::string_view text);
// Several of them, comma-separated ("12.8,13.2@sha256:HEX").
absl::StatusOr<std::vector<WantedToolkit>> ParseWantedToolkits(absl::string_view text);

// The toolkits the coordinator behind `stub` serves, as it lists them
// (at most 64; their words are checked where they are used).
absl::StatusOr<std::vector<v1::ServedToolkit>> ListServedToolkits(
    v1::ContentStore::StubInterface& stub, absl::Duration timeout = absl::Seconds(30));

// The newest of `served` that `wanted` admits, with a version, a manifest
// digest and a size that are well formed. NOT_FOUND naming what the
// coordinator serves (or that it serves none) and how an operator adds
// one; for a pinned toolkit of the release served with another manifest,
// FAILED_PRECONDITION naming both digests (never NOT_FOUND: a client
// must not fall back to PyPI for it).
absl::StatusOr<v1::ServedToolkit> ChooseServedToolkit(const std::vector<v1::ServedToolkit>& served,
                                                      const WantedToolkit& wanted);

// How much of this machine one toolkit's fetch may take.
struct ToolkitFetchLimits {
  // The most its files may declare together (--toolkit-max-size); checked
  // against the manifest before the first byte of a file.
  int64_t max_bytes = int64_t{8} << 30;
  // No byte for this long ends the fetch (--toolkit-stall-timeout).
  absl::Duration stall = absl::Seconds(60);
  // The whole fetch, manifest to last file (--toolkit-fetch-timeout).
  absl::Duration deadline = absl::Minutes(30);
};
// The flags' words: "8GiB", "60s", "30m". INVALID_ARGUMENT naming the flag.
absl::StatusOr<ToolkitFetchLimits> ParseToolkitFetchLimits(absl::string_view max_size,
                                                           absl::string_view stall,
                                                           absl::string_view deadline);
// The flags' help, shared by the worker and the client.
inline constexpr char kToolkitMaxSizeHelp[] =
    "the most one toolkit fetched from a coordinator may be, checked against its manifest "
    "before the first byte (a compile part is about 300 MiB)";
inline constexpr char kToolkitStallHelp[] =
    "a toolkit fetch from a coordinator that receives no byte for this long ends (60s, 5m)";
inline constexpr char kToolkitFetchTimeoutHelp[] =
    "the longest one toolkit fetch from a coordinator may take, manifest to last file (30m)";

// Downloads `toolkit` into `destination`, a folder this call makes (its
// parent must exist and `destination` must not): the manifest, parsed as
// hostile (ParseToolkitManifest); the files' total against
// `limits.max_bytes` and the disk's free space before a file's first byte;
// each file created exclusively beneath the folder's handle, no link
// followed (ContainedFolder), streamed and checked against its digest, its
// mode (0755 or 0644, nothing else) set on the open file; the links last;
// the manifest beside them; then the whole folder checked against it
// (VerifyManifest). A stall or the deadline of `limits` ends it with
// DEADLINE_EXCEEDED saying which and what to do. Nothing of a failed fetch
// stays: its files and `destination` are removed. Errors name the file,
// terminal-safe.
// `make_room`, when given, is told the files' total once the manifest is
// checked and within the limit, before the disk's free space is: a cache
// makes room there, or refuses (its error ends the fetch as it is).
absl::Status DownloadToolkit(BlobClient& blobs, const v1::ServedToolkit& toolkit,
                             const std::string& destination, const ToolkitFetchLimits& limits,
                             const std::function<absl::Status(int64_t bytes)>& make_room = nullptr);

// The manifest digest's words for people and pins: "sha256:HEX".
std::string ManifestPin(const v1::ServedToolkit& toolkit);

// "CUDA 13.2.86 (305.1 MiB, 402 files, added from /opt/cuda-13.2)".
std::string DescribeServedToolkit(const v1::ServedToolkit& toolkit);

// What to say when `toolkit` was taken for `wanted` without a pin: that
// its content is whatever the coordinator sent, and the pin that accepts
// only this one ("--served-toolkit 13.2@sha256:HEX" for a worker). Empty
// for a pinned one.
std::string UnpinnedNotice(const WantedToolkit& wanted, const v1::ServedToolkit& toolkit,
                           absl::string_view how_to_pin);

}  // namespace distcc_cuda
