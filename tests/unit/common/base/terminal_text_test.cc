// SPDX-License-Identifier: Apache-2.0
#include "common/base/terminal_text.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace distcc_cuda {
namespace {

TEST(TerminalSafeTest, WhatATerminalWouldActOnIsWrittenOut) {
  struct Case {
    const char* what;
    std::string text;
    std::string safe;
  };
  const std::vector<Case> cases = {
      {"plain text", "unit gemm_128x256 on worker-a: 2.0 GiB",
       "unit gemm_128x256 on worker-a: 2.0 GiB"},
      {"a colour", "\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"},
      {"a window title", "\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"},
      {"a carriage return that hides the line", "ok\rFAILED", "ok\\x0dFAILED"},
      {"a line break", "one\ntwo", "one\\x0atwo"},
      {"a tab and DEL", "a\tb\x7f", "a\\x09b\\x7f"},
      {"a NUL", std::string("a\0b", 3), "a\\x00b"},
      {"the 8-bit CSI, a C1 control",
       "\xc2\x9b"
       "2J",
       "\\xc2\\x9b2J"},
      {"a lone 8-bit CSI byte",
       "\x9b"
       "2J",
       "\\x9b2J"},
      {"a right-to-left override",
       "a\xe2\x80\xae"
       "b",
       "a\\xe2\\x80\\xaeb"},
      {"a first-strong isolate",
       "a\xe2\x81\xa8"
       "b",
       "a\\xe2\\x81\\xa8b"},
      {"well-formed UTF-8 stays", "\xce\xb1\xce\xb2 \xe2\x86\x92 \xf0\x9f\x9a\x80",
       "\xce\xb1\xce\xb2 \xe2\x86\x92 \xf0\x9f\x9a\x80"},
      {"an overlong slash", "\xc0\xaf", "\\xc0\\xaf"},
      {"a truncated sequence", "a\xe2\x86", "a\\xe2\\x86"},
      {"a surrogate", "\xed\xa0\x80", "\\xed\\xa0\\x80"},
  };
  for (const Case& c : cases) EXPECT_EQ(TerminalSafe(c.text), c.safe) << c.what;
}

TEST(TerminalSafeTest, LineBreaksMayStayAndLongTextIsCut) {
  EXPECT_EQ(TerminalSafe("one\ntwo\r\n", /*keep_newlines=*/true), "one\ntwo\\x0d\n");
  EXPECT_EQ(TerminalSafe(std::string(10, 'x'), false, 4), "xxxx...");
  EXPECT_EQ(TerminalSafe("\x1b\x1b", false, 1), "\\x1b...");
}

TEST(TerminalSafeTest, IsTerminalSafeIsWhetherNothingWouldBeWrittenOut) {
  EXPECT_TRUE(IsTerminalSafe(""));
  EXPECT_TRUE(IsTerminalSafe("attention fwd → sm_100 (πυρήνες)"));
  EXPECT_FALSE(IsTerminalSafe("line\nbreak"));
  EXPECT_FALSE(IsTerminalSafe("tab\there"));
  EXPECT_FALSE(IsTerminalSafe("\x1b[2J"));
  // A right-to-left override, a C1 CSI, and text that is not UTF-8.
  EXPECT_FALSE(
      IsTerminalSafe("abc\xe2\x80\xae"
                     "fdp"));
  EXPECT_FALSE(
      IsTerminalSafe("\xc2\x9b"
                     "2J"));
  EXPECT_FALSE(IsTerminalSafe("caf\xe9"));
  // Long text is judged whole, not cut.
  EXPECT_TRUE(IsTerminalSafe(std::string(10000, 'a')));
}

}  // namespace
}  // namespace distcc_cuda
