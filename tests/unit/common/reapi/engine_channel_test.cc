// SPDX-License-Identifier: Apache-2.0
// How an engine's address and headers are read from flags
// (engine_channel.h): the URL forms taken and refused, and the headers a
// gRPC call may carry. OpenEngineChannel itself is exercised against a
// scripted engine in tests/integration/engine_client_test.cc.
#include "common/reapi/engine_channel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

TEST(EngineUrlTest, TakesGrpcAndGrpcsWithHostAndPort) {
  struct Case {
    const char* url;
    const char* host_port;
    bool tls;
  };
  const Case cases[] = {
      {"grpc://h:1", "h:1", false},
      {"grpcs://h:1", "h:1", true},
      {"grpc://127.0.0.1:8980", "127.0.0.1:8980", false},
      {"grpcs://remote.buildbuddy.io:443", "remote.buildbuddy.io:443", true},
      {"grpc://[::1]:50051", "[::1]:50051", false},
  };
  for (const Case& c : cases) {
    absl::StatusOr<EngineAddress> engine = ParseEngineUrl(c.url, "--remote-executor");
    ASSERT_TRUE(engine.ok()) << c.url << ": " << engine.status();
    EXPECT_EQ(engine->host_port, c.host_port) << c.url;
    EXPECT_EQ(engine->tls, c.tls) << c.url;
    // Url() gives the form it was written in, for messages.
    EXPECT_EQ(engine->Url(), c.url);
  }
}

TEST(EngineUrlTest, RefusesOtherFormsNamingTheFlag) {
  const char* cases[] = {
      "grpc://h",         // no port
      "grpcs://h",        // no port
      "grpc://h:",        // empty port
      "grpc://:1",        // no host
      "grpc://",          // nothing
      "grpc://h:1/path",  // a path
      "grpcs://h:1/",     // a trailing slash
      "http://h:1",       // another scheme
      "https://h:1",      // another scheme
      "h:1",              // no scheme
      "",                 // empty
      "GRPC://h:1",       // schemes are matched as written
      " grpc://h:1",      // leading space
  };
  for (const char* url : cases) {
    absl::StatusOr<EngineAddress> engine = ParseEngineUrl(url, "--bots-api");
    ASSERT_FALSE(engine.ok()) << "'" << url << "' was taken as " << engine->Url();
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(engine.status().message(), HasSubstr("--bots-api")) << url;
    EXPECT_THAT(engine.status().message(), HasSubstr("grpc://HOST:PORT")) << url;
    EXPECT_THAT(engine.status().message(), HasSubstr("grpcs://HOST:PORT")) << url;
  }
}

TEST(EngineUrlTest, ErrorNamesWhicheverFlagItWasGivenAs) {
  absl::StatusOr<EngineAddress> engine = ParseEngineUrl("http://h:1", "--remote-executor");
  ASSERT_FALSE(engine.ok());
  EXPECT_THAT(engine.status().message(), HasSubstr("--remote-executor"));
  EXPECT_THAT(engine.status().message(), HasSubstr("'http://h:1'"));
}

TEST(EngineUrlTest, ErrorShowsControlCharactersEscaped) {
  absl::StatusOr<EngineAddress> engine = ParseEngineUrl("grpc://h\x1b[2J", "--bots-api");
  ASSERT_FALSE(engine.ok());
  EXPECT_THAT(std::string(engine.status().message()), ::testing::Not(HasSubstr("\x1b")));
}

TEST(EngineHeaderTest, KeyIsLowerCasedAndValueKeptAsWritten) {
  struct Case {
    const char* text;
    const char* key;
    const char* value;
  };
  const Case cases[] = {
      {"x-buildbuddy-api-key=SECRET", "x-buildbuddy-api-key", "SECRET"},
      {"X-Api-Key=MixedCase Value", "x-api-key", "MixedCase Value"},
      {"tenant.id_1=a=b=c", "tenant.id_1", "a=b=c"},  // the first '=' splits
      {"x-empty=", "x-empty", ""},
      {"authorization=Bearer abc~!@#$%^&*()", "authorization", "Bearer abc~!@#$%^&*()"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::pair<std::string, std::string>> header = ParseEngineHeader(c.text);
    ASSERT_TRUE(header.ok()) << c.text << ": " << header.status();
    EXPECT_EQ(header->first, c.key) << c.text;
    EXPECT_EQ(header->second, c.value) << c.text;
  }
}

TEST(EngineHeaderTest, RefusesTextWithoutKeyAndEquals) {
  for (const char* text : {"x-api-key", "=value", "", "x-api-key:SECRET"}) {
    absl::StatusOr<std::pair<std::string, std::string>> header = ParseEngineHeader(text);
    ASSERT_FALSE(header.ok()) << "'" << text << "' was taken";
    EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(header.status().message(), HasSubstr("--remote-header")) << text;
    EXPECT_THAT(header.status().message(), HasSubstr("KEY=VALUE")) << text;
  }
}

TEST(EngineHeaderTest, RefusesKeysWithOtherCharacters) {
  for (const char* text :
       {"x api=1", "x:api=1", "x/api=1", "x\tapi=1", "caf\xc3\xa9=1", "x\napi=1", "x+api=1"}) {
    absl::StatusOr<std::pair<std::string, std::string>> header = ParseEngineHeader(text);
    ASSERT_FALSE(header.ok()) << "'" << text << "' was taken";
    EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(header.status().message(), HasSubstr("letters, digits")) << text;
    // The key is quoted safely for a terminal.
    EXPECT_THAT(std::string(header.status().message()), ::testing::Not(HasSubstr("\n")));
  }
}

TEST(EngineHeaderTest, RefusesGrpcOwnAndBinaryKeys) {
  for (const char* text : {"grpc-timeout=1S", "GRPC-Encoding=gzip", "x-trace-bin=AAAA",
                           "X-Trace-BIN=AAAA", "grpc-x-bin=1"}) {
    absl::StatusOr<std::pair<std::string, std::string>> header = ParseEngineHeader(text);
    ASSERT_FALSE(header.ok()) << "'" << text << "' was taken";
    EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(header.status().message(), HasSubstr("grpc-")) << text;
    EXPECT_THAT(header.status().message(), HasSubstr("-bin")) << text;
  }
  // Merely containing the words is fine.
  EXPECT_TRUE(ParseEngineHeader("x-grpc-thing=1").ok());
  EXPECT_TRUE(ParseEngineHeader("x-binary=1").ok());
  EXPECT_TRUE(ParseEngineHeader("x-bin-y=1").ok());
}

TEST(EngineHeaderTest, RefusesValuesThatAreNotPrintableAscii) {
  for (const std::string& text :
       {std::string("k=a\nb"), std::string("k=a\rb"), std::string("k=\x1b[2J"),
        std::string("k=a\x7f"), std::string("k=tab\there"), std::string("k=caf\xc3\xa9"),
        std::string("k=nul\0byte", 10)}) {
    absl::StatusOr<std::pair<std::string, std::string>> header = ParseEngineHeader(text);
    ASSERT_FALSE(header.ok()) << "a value with a control character was taken";
    EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(header.status().message(), HasSubstr("printable ASCII"));
    EXPECT_THAT(header.status().message(), HasSubstr("--remote-header k"));
  }
}

}  // namespace
}  // namespace distcc_cuda
