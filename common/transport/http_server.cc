// SPDX-License-Identifier: Apache-2.0
#include "common/transport/http_server.h"

#include <civetweb.h>

#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/transport/listen_address.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda {
namespace {

// What civetweb said while starting on this thread, for the error.
thread_local std::string start_error;

int LogMessage(const mg_connection* /*connection*/, const char* message) {
  start_error = message;
  spdlog::debug("http: {}", message);
  return 1;  // not to stderr as well
}

const char* ReasonOf(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    default:
      return status >= 500 ? "Internal Server Error" : "Bad Request";
  }
}

void Send(mg_connection* connection, const HttpResponse& response, bool head) {
  mg_printf(connection,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
            "Content-Security-Policy: default-src 'self'; frame-ancestors 'none'\r\n"
            "Referrer-Policy: no-referrer\r\n"
            "Connection: close\r\n\r\n",
            response.status, ReasonOf(response.status), response.content_type.c_str(),
            response.body.size());
  if (!head && !response.body.empty()) {
    mg_write(connection, response.body.data(), response.body.size());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options) {
  const std::string& address = options.listen_address;
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", options.purpose, " address '", address,
                     "' is not HOST:PORT (e.g. 127.0.0.1:9464, or 0.0.0.0:9464 to be reachable)"));
  }
  if (!options.reachable && !IsLoopbackAddress(address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", options.purpose, " address ", address,
        " can be reached from other machines, and what it serves needs no credentials "
        "to read; listen on 127.0.0.1 (e.g. behind an SSH tunnel or a scraping agent on this "
        "machine), or allow it explicitly"));
  }
  static std::once_flag initialised;
  std::call_once(initialised, [] { mg_init_library(0); });

  std::unique_ptr<HttpServer> server(new HttpServer());
  server->options_ = std::move(options);
  // civetweb writes an IPv6 address as [HOST]:PORT too.
  std::string host = server->options_.listen_address.substr(0, colon);
  server->host_ = host;
  std::string threads = std::to_string(std::max(1, server->options_.threads));
  const char* civet_options[] = {"listening_ports",
                                 server->options_.listen_address.c_str(),
                                 "num_threads",
                                 threads.c_str(),
                                 "request_timeout_ms",
                                 "10000",
                                 "enable_keep_alive",
                                 "no",
                                 nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.log_message = LogMessage;
  start_error.clear();
  server->context_ = mg_start(&callbacks, server.get(), civet_options);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve ", server->options_.purpose, " on ", server->options_.listen_address, ": ",
        start_error.empty() ? "the address cannot be bound" : start_error,
        "; is another process listening there?"));
  }
  mg_set_request_handler(server->context_, "/", &HttpServer::Handle, server.get());
  mg_server_port ports[2];
  int count = mg_get_server_ports(server->context_, 2, ports);
  if (count < 1) {
    return absl::UnavailableError(absl::StrCat("serving ", server->options_.purpose, " on ",
                                               server->options_.listen_address,
                                               ": no port was bound"));
  }
  server->port_ = ports[0].port;
  return server;
}

HttpServer::~HttpServer() {
  if (context_ == nullptr) return;
  // civetweb's listening thread notices the stop only when its poll, of 2 s,
  // returns: connections to its port end the poll, so that stopping takes
  // milliseconds.
  absl::Notification stopped;
  std::thread stopper([this, &stopped] {
    mg_stop(context_);
    stopped.Notify();
  });
  std::string host = host_;
  if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
  if (host == "[::]") host = "[::1]";
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  for (int i = 0; i < 100 && !stopped.WaitForNotificationWithTimeout(absl::Milliseconds(20)); ++i) {
    char error[64];
    mg_connection* wake = mg_connect_client(host.c_str(), port_, 0, error, sizeof(error));
    if (wake != nullptr) mg_close_connection(wake);
  }
  stopper.join();
}

std::string HttpServer::url() const { return absl::StrCat("http://", host_, ":", port_); }

int HttpServer::Handle(mg_connection* connection, void* self) {
  const HttpServer& server = *static_cast<HttpServer*>(self);
  const mg_request_info* info = mg_get_request_info(connection);
  bool head = std::strcmp(info->request_method, "HEAD") == 0;
  if (!head && std::strcmp(info->request_method, "GET") != 0) {
    Send(connection, {405, "text/plain; charset=utf-8", "read-only: GET or HEAD\n"}, false);
    return 405;
  }
  HttpRequest request;
  request.path = info->local_uri != nullptr ? info->local_uri : "/";
  if (info->query_string != nullptr) request.query = info->query_string;
  auto route = server.options_.routes.find(request.path);
  if (route == server.options_.routes.end()) {
    Send(connection, {404, "text/plain; charset=utf-8", "no such page\n"}, head);
    return 404;
  }
  HttpResponse response = route->second(request);
  Send(connection, response, head);
  return response.status;
}

}  // namespace distcc_cuda
