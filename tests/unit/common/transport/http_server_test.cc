// SPDX-License-Identifier: Apache-2.0
#include "common/transport/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/counter.h>

#include "absl/strings/str_cat.h"
#include "common/transport/metrics.h"
#include "tests/support/prometheus_text.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

HttpServerOptions Echo(const std::string& address) {
  HttpServerOptions options;
  options.listen_address = address;
  options.routes["/echo"] = [](const HttpRequest& request) {
    return HttpResponse{200, "text/plain",
                        absl::StrCat("path ", request.path, " query ", request.query)};
  };
  return options;
}

TEST(HttpServerTest, AnswersItsPathsReadOnlyOnALoopbackPortItPicked) {
  auto server = HttpServer::Start(Echo("127.0.0.1:0"));
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  const std::string url = (*server)->url();
  EXPECT_EQ(url, absl::StrCat("http://127.0.0.1:", (*server)->port()));

  auto get = testing::HttpCall("GET", url + "/echo?x=1&y=2");
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->content_type, "text/plain");
  EXPECT_EQ(get->body, "path /echo query x=1&y=2");

  auto head = testing::HttpCall("HEAD", url + "/echo");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->body, "");

  for (const char* method : {"POST", "PUT", "DELETE"}) {
    auto refused = testing::HttpCall(method, url + "/echo");
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_EQ(refused->status, 405) << method;
  }
  for (const char* path : {"/", "/echo/", "/../etc/passwd", "/metrics"}) {
    auto missing = testing::HttpCall("GET", url + path);
    ASSERT_TRUE(missing.ok()) << missing.status();
    EXPECT_EQ(missing->status, 404) << path;
  }
}

TEST(HttpServerTest, AReachableAddressNeedsTheOperatorsConsent) {
  auto refused = HttpServer::Start(Echo("0.0.0.0:0"));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_THAT(refused.status().message(), HasSubstr("can be reached from other machines"));

  HttpServerOptions open = Echo("0.0.0.0:0");
  open.reachable = true;
  auto server = HttpServer::Start(std::move(open));
  ASSERT_TRUE(server.ok()) << server.status();
  // Reached here through loopback only.
  auto get = testing::HttpGet(absl::StrCat("http://127.0.0.1:", (*server)->port(), "/echo"));
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_EQ(*get, "path /echo query ");
}

TEST(HttpServerTest, AnAddressThatIsNotHostPortOrIsTakenIsRefused) {
  for (const char* bad : {"9464", ":9464", "127.0.0.1:http", "127.0.0.1:70000", ""}) {
    auto refused = HttpServer::Start(Echo(bad));
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << bad << ": " << refused.status();
  }
  auto first = HttpServer::Start(Echo("127.0.0.1:0"));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = HttpServer::Start(Echo(absl::StrCat("127.0.0.1:", (*first)->port())));
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat((*first)->port())));
}

TEST(MetricsPageTest, ServesRegisteredAndSnapshotMetricsInTheTextFormat) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& counter = prometheus::BuildCounter()
                      .Name("distcc_cuda_things_total")
                      .Help("Things")
                      .Register(*registry)
                      .Add({{"kind", "a \"quoted\" one"}});
  counter.Increment(3);
  int scrapes = 0;
  HttpServerOptions options;
  options.routes["/metrics"] =
      MetricsPage(registry, {[&scrapes] {
                    prometheus::MetricFamily family = MetricFamilyOf(
                        "distcc_cuda_scrapes", "Scrapes so far", prometheus::MetricType::Gauge);
                    AddSample(family, ++scrapes, {{"worker", "w1"}});
                    return std::vector<prometheus::MetricFamily>{family};
                  }});
  auto server = HttpServer::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  for (int i = 1; i <= 2; ++i) {
    auto answer = testing::HttpCall("GET", (*server)->url() + "/metrics");
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_THAT(answer->content_type, HasSubstr("text/plain; version=0.0.4"));
    auto scraped = testing::ParsePrometheusText(answer->body);
    ASSERT_TRUE(scraped.ok()) << scraped.status() << "\n" << answer->body;
    EXPECT_EQ(scraped->types.at("distcc_cuda_things_total"), "counter");
    EXPECT_EQ(scraped->Value("distcc_cuda_things_total{kind=\"a \"quoted\" one\"}"), 3);
    EXPECT_EQ(scraped->Value("distcc_cuda_scrapes{worker=\"w1\"}"), i);
  }
}

TEST(PrometheusTextTest, RefusesWhatAPrometheusServerWould) {
  const char* bad[] = {
      "x 1\n",                                  // no family declared
      "# TYPE x gauge\nx{a=\"1} 1\n",           // label not closed
      "# TYPE x gauge\nx{1a=\"1\"} 1\n",        // bad label name
      "# TYPE x gauge\nx one\n",                // bad value
      "# TYPE x gauge\n# TYPE x gauge\nx 1\n",  // declared twice
      "# TYPE x counter\nx -1\n",               // negative counter
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\n"
      "h_bucket{le=\"+Inf\"} 2\nh_count 2\n",                   // not cumulative
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_count 2\n",  // no +Inf
      "# TYPE x gauge\nx 1",                                    // no final newline
  };
  for (const char* text : bad) {
    EXPECT_FALSE(testing::ParsePrometheusText(text).ok()) << text;
  }
  auto good = testing::ParsePrometheusText(
      "# HELP h a histogram\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
      "h_sum 3.5\nh_count 2\n");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->Value("h_sum"), 3.5);
}

}  // namespace
}  // namespace distcc_cuda
