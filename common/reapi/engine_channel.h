// SPDX-License-Identifier: Apache-2.0
// How distcc-cuda reaches another Remote Execution API engine: its address
// as grpc://HOST:PORT or grpcs://HOST:PORT (a worker's --bots-api, a
// client's --remote-executor), the headers every call carries
// (--remote-header K=V: an API key, a tenant), and the channel that sends
// them.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/transport/tls_credentials.h"

namespace distcc_cuda {

struct EngineAddress {
  std::string host_port;  // HOST:PORT
  bool tls = false;       // grpcs://
  // "grpc://HOST:PORT" or "grpcs://HOST:PORT", for messages.
  std::string Url() const;
};

// `url`, given as flag `flag`: grpc://HOST:PORT or grpcs://HOST:PORT.
// INVALID_ARGUMENT naming the flag and the forms it takes.
absl::StatusOr<EngineAddress> ParseEngineUrl(const std::string& url, const std::string& flag);

using EngineHeaders = std::vector<std::pair<std::string, std::string>>;

// "K=V" as a header every call to the engine sends: K is lower-cased
// (gRPC metadata keys are), and must be letters, digits, '-', '_' or '.',
// not starting "grpc-" nor ending "-bin"; V printable ASCII. INVALID_ARGUMENT
// saying which part is wrong.
absl::StatusOr<std::pair<std::string, std::string>> ParseEngineHeader(const std::string& text);

// The files of --remote-tls-ca (the CA that issued the engine's
// certificate; empty: the system's CAs), --remote-tls-cert and
// --remote-tls-key (the client certificate an engine that asks for one
// gets, and its key). All empty: no files.
struct EngineTlsFiles {
  std::string ca;
  std::string cert;
  std::string key;
};

// Reads and checks `files` for `engine`, once at start: nullopt when none
// is given. INVALID_ARGUMENT when they are given for a grpc:// engine, for
// a certificate without its key (or the other way round), or for a key
// that is not the certificate's; NOT_FOUND for a missing file;
// FAILED_PRECONDITION for a certificate that expired or is not valid yet.
// Messages name the flag and the file. The material's identity is left
// empty: the engine's PKI is not the cluster's.
absl::StatusOr<std::optional<TlsMaterial>> LoadEngineTls(const EngineTlsFiles& files,
                                                         const EngineAddress& engine);

// A channel to `engine` whose every call carries `headers`: over TLS for
// grpcs://, presenting `tls`'s certificate where it holds one and trusting
// its CA where it names one, else trusting the system's CAs.
std::shared_ptr<grpc::Channel> OpenEngineChannel(const EngineAddress& engine,
                                                 const std::optional<TlsMaterial>& tls,
                                                 const EngineHeaders& headers);

}  // namespace distcc_cuda
