// SPDX-License-Identifier: Apache-2.0
// A small read-only HTTP server (civetweb, Debian's libcivetweb) for what an
// operator looks at: /metrics on the coordinator and the workers, the
// coordinator's dashboard. It serves GET and HEAD on a fixed set of paths,
// each answered by a function; there is no file serving, no upload and no
// state it could change. Like the gRPC listener, it serves loopback unless
// the operator allows a reachable address.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct mg_context;
struct mg_connection;

namespace distcc_cuda {

struct HttpRequest {
  std::string path;   // "/metrics"
  std::string query;  // after '?', undecoded; "" if none
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Answers one request; called on one of the server's threads, several at
// once: it must be thread-safe and quick (it must not wait for a build).
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  // HOST:PORT; port 0 picks a free one (HttpServer::port tells which).
  std::string listen_address = "127.0.0.1:0";
  // Serve on an address other than loopback (anyone who can reach it reads
  // what the handlers answer, without credentials).
  bool reachable = false;
  // Exact paths and what answers them; any other path is 404, any method
  // other than GET and HEAD 405.
  std::map<std::string, HttpHandler> routes;
  // Threads answering requests at once (a scrape, a dashboard or two).
  int threads = 4;
  // What it is, for messages: "metrics", "dashboard".
  std::string purpose = "http";
};

class HttpServer {
 public:
  // Starts serving. INVALID_ARGUMENT for an address that is not HOST:PORT,
  // or off loopback without `reachable`; UNAVAILABLE if it cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options);
  // Stops serving; requests in flight are finished first.
  ~HttpServer();

  int port() const { return port_; }
  // "http://HOST:PORT", for the log and tests.
  std::string url() const;

 private:
  HttpServer() = default;
  static int Handle(mg_connection* connection, void* self);

  HttpServerOptions options_;
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::string host_;
};

}  // namespace distcc_cuda
