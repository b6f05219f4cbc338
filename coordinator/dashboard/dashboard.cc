// SPDX-License-Identifier: Apache-2.0
#include "coordinator/dashboard/dashboard.h"

#include <google/protobuf/util/json_util.h>

#include <regex>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/dashboard/dashboard_assets.h"

namespace distcc_cuda::coordinator {
namespace {

HttpResponse Json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  HttpResponse response;
  response.content_type = "application/json";
  if (!google::protobuf::util::MessageToJsonString(message, &response.body, options).ok()) {
    return {500, "text/plain; charset=utf-8", "cannot write the answer as JSON\n"};
  }
  return response;
}

// The value of `name` in a query string (ids need no decoding: they are
// letters, digits and dashes).
std::string QueryValue(const std::string& query, absl::string_view name) {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    if (absl::ConsumePrefix(&pair, name) && absl::ConsumePrefix(&pair, "=")) {
      return std::string(pair);
    }
  }
  return "";
}

}  // namespace

std::map<std::string, HttpHandler> DashboardRoutes(const BuildScheduler* scheduler) {
  std::map<std::string, HttpHandler> routes;
  for (const DashboardAsset& asset : DashboardAssets()) {
    routes[asset.path] = [asset](const HttpRequest&) {
      return HttpResponse{200, asset.content_type, asset.body};
    };
  }
  routes["/api/status"] = [scheduler](const HttpRequest&) {
    return Json(scheduler->Status(absl::Now()));
  };
  routes["/api/build"] = [scheduler](const HttpRequest& request) {
    static const std::regex kBuildId("[A-Za-z0-9-]{1,128}");
    const std::string id = QueryValue(request.query, "id");
    if (!std::regex_match(id, kBuildId)) {
      return HttpResponse{400, "text/plain; charset=utf-8",
                          "id= must be a build id (letters, digits and dashes)\n"};
    }
    std::optional<v1::BuildRecord> record = scheduler->BuildRecordOf(id);
    if (!record) {
      return HttpResponse{404, "text/plain; charset=utf-8",
                          "no such build among those running or lately ended\n"};
    }
    return Json(*record);
  };
  return routes;
}

}  // namespace distcc_cuda::coordinator
