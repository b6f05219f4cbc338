// SPDX-License-Identifier: Apache-2.0
#include "common/base/logging.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The default logger's text lines, written into a string for one test.
class TextLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
    ASSERT_TRUE(UseLogFormat("text", "test").ok());
  }
  void TearDown() override { spdlog::set_default_logger(previous_); }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(TextLogsTest, WhatAPeerSentCannotClearTheScreenOrForgeALine) {
  spdlog::info("build {} accepted", "x\x1b[2J\x1b]0;PWNED\x07\nFORGED LOG LINE");
  spdlog::info("worker {} joined", "gpu-node-7 (πυρήνες)");
  const std::string text = out_.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));
  EXPECT_THAT(text, Not(HasSubstr("\x07")));
  EXPECT_THAT(text, HasSubstr("build x\\x1b[2J\\x1b]0;PWNED\\x07\\x0aFORGED LOG LINE accepted"));
  // Printable text in any script is left as it is.
  EXPECT_THAT(text, HasSubstr("worker gpu-node-7 (πυρήνες) joined"));
  EXPECT_THAT(text, HasSubstr("[info]"));
}

// A line written later, elsewhere (the scheduler's after its lock), carries
// the fields that were in scope when it was made.
TEST_F(TextLogsTest, ALineLoggedLaterCarriesTheFieldsInScopeWhenItWasMade) {
  ASSERT_TRUE(UseLogFormat("json", "test").ok());
  LogFieldList saved;
  {
    LogFields build{{"build", "b-1"}};
    LogFields unit{{"unit", "kern_1"}, {"worker", "w-a"}};
    saved = FieldsInScope();
  }
  EXPECT_EQ(FieldsInScope().size(), 0u) << "the scopes ended";
  {
    LogFields later(saved);
    spdlog::warn("re-queueing unit kern_1");
  }
  spdlog::info("no fields");
  const std::string text = out_.str();
  const std::string first = text.substr(0, text.find('\n'));
  EXPECT_THAT(first, HasSubstr("\"build\":\"b-1\""));
  EXPECT_THAT(first, HasSubstr("\"unit\":\"kern_1\""));
  EXPECT_THAT(first, HasSubstr("\"worker\":\"w-a\""));
  EXPECT_THAT(text.substr(first.size() + 1), Not(HasSubstr("b-1")));
}

}  // namespace
}  // namespace distcc_cuda
