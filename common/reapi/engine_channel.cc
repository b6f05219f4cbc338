// SPDX-License-Identifier: Apache-2.0
#include "common/reapi/engine_channel.h"

#include <grpcpp/support/client_interceptor.h>

#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/status.h"
#include "common/base/terminal_text.h"
#include "common/transport/certificates.h"

namespace distcc_cuda {
namespace {

// Adds the engine's headers to every call's initial metadata.
class HeaderInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit HeaderInterceptor(const EngineHeaders* headers) : headers_(headers) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* metadata = methods->GetSendInitialMetadata();
      for (const auto& [key, value] : *headers_) metadata->emplace(key, value);
    }
    methods->Proceed();
  }

 private:
  const EngineHeaders* headers_;
};

class HeaderInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit HeaderInterceptorFactory(std::shared_ptr<const EngineHeaders> headers)
      : headers_(std::move(headers)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new HeaderInterceptor(headers_.get());
  }

 private:
  // Shared with the channel's other factories' interceptors for its life.
  std::shared_ptr<const EngineHeaders> headers_;
};

bool IsHeaderKeyChar(char c) {
  return absl::ascii_isdigit(c) || absl::ascii_islower(c) || c == '-' || c == '_' || c == '.';
}

}  // namespace

std::string EngineAddress::Url() const {
  return absl::StrCat(tls ? "grpcs://" : "grpc://", host_port);
}

absl::StatusOr<EngineAddress> ParseEngineUrl(const std::string& url, const std::string& flag) {
  for (const auto& [scheme, tls] : {std::pair{"grpc://", false}, std::pair{"grpcs://", true}}) {
    if (!absl::StartsWith(url, scheme)) continue;
    EngineAddress engine{url.substr(std::string(scheme).size()), tls};
    const size_t colon = engine.host_port.rfind(':');
    if (engine.host_port.empty() || engine.host_port.find('/') != std::string::npos ||
        colon == std::string::npos || colon == 0 || colon + 1 == engine.host_port.size()) {
      break;
    }
    return engine;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " '", TerminalSafe(url.substr(0, 200)),
                   "' is not grpc://HOST:PORT or grpcs://HOST:PORT (TLS)"));
}

absl::StatusOr<std::pair<std::string, std::string>> ParseEngineHeader(const std::string& text) {
  const size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--remote-header '", TerminalSafe(text.substr(0, 200)),
        "' is not KEY=VALUE (for example --remote-header x-buildbuddy-api-key=SECRET)"));
  }
  std::string key = absl::AsciiStrToLower(text.substr(0, equals));
  std::string value = text.substr(equals + 1);
  for (char c : key) {
    if (!IsHeaderKeyChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--remote-header key '", TerminalSafe(key.substr(0, 200)),
                       "' may hold only letters, digits, '-', '_' and '.'"));
    }
  }
  if (absl::StartsWith(key, "grpc-") || absl::EndsWith(key, "-bin")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--remote-header key '", key,
                     "' is gRPC's own (grpc-...) or binary (...-bin); send a text header"));
  }
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--remote-header ", key, ": the value must be printable ASCII (no control characters)"));
    }
  }
  return std::pair{std::move(key), std::move(value)};
}

absl::StatusOr<std::optional<TlsMaterial>> LoadEngineTls(const EngineTlsFiles& files,
                                                         const EngineAddress& engine) {
  if (files.ca.empty() && files.cert.empty() && files.key.empty()) return std::nullopt;
  if (!engine.tls) {
    return absl::InvalidArgumentError(
        absl::StrCat("--remote-tls-ca, --remote-tls-cert and --remote-tls-key are for an engine "
                     "reached over TLS, and ",
                     engine.Url(), " is not: write its address as grpcs://", engine.host_port));
  }
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.cert.empty() ? "--remote-tls-key" : "--remote-tls-cert", " is set but ",
                     files.cert.empty() ? "--remote-tls-cert" : "--remote-tls-key",
                     " is not: the client certificate the engine asks for goes with its private "
                     "key (give both, or neither to present none)"));
  }
  TlsMaterial material;
  const std::tuple<const char*, const std::string*, std::string*> named[] = {
      {"--remote-tls-ca", &files.ca, &material.ca_pem},
      {"--remote-tls-cert", &files.cert, &material.certificate_pem},
      {"--remote-tls-key", &files.key, &material.key_pem}};
  for (const auto& [flag, path, content] : named) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> read = ReadFile(*path);
    if (!read.ok()) return Annotate(read.status(), flag);
    *content = std::move(*read);
    if (content == &material.key_pem) continue;
    if (absl::Status valid = CheckValidAt(*content, absl::Now()); !valid.ok()) {
      return absl::Status(valid.code(), absl::StrCat(flag, " ", *path, " ", valid.message()));
    }
  }
  if (!files.key.empty()) {
    if (absl::Status key = CheckKeyMatches(material.certificate_pem, material.key_pem); !key.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--remote-tls-key ", files.key, " ",
                                                     key.message(), " ", files.cert,
                                                     "; pass the key written with it"));
    }
  }
  return material;
}

std::shared_ptr<grpc::Channel> OpenEngineChannel(const EngineAddress& engine,
                                                 const std::optional<TlsMaterial>& tls,
                                                 const EngineHeaders& headers) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (engine.tls) {
    grpc::SslCredentialsOptions options;
    if (tls.has_value()) {
      // Empty fields: the system's CAs, no client certificate.
      options.pem_root_certs = tls->ca_pem;
      options.pem_private_key = tls->key_pem;
      options.pem_cert_chain = tls->certificate_pem;
    }
    credentials = grpc::SslCredentials(options);
  }
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // A link that died without a word (a half-open connection) ends the
  // calls on it within a few minutes instead of holding a slot for ever;
  // servers refuse pings more often than every 5 minutes.
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5 * 60 * 1000);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  if (!headers.empty()) {
    factories.push_back(
        std::make_unique<HeaderInterceptorFactory>(std::make_shared<const EngineHeaders>(headers)));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(engine.host_port, credentials,
                                                                 arguments, std::move(factories));
}

}  // namespace distcc_cuda
