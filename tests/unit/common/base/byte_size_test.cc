// SPDX-License-Identifier: Apache-2.0
#include "common/base/byte_size.h"

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distcc_cuda {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;
constexpr int64_t kGiB = 1024 * kMiB;
constexpr int64_t kTiB = 1024 * kGiB;

struct ParseCase {
  std::string text;
  int64_t bytes;
};

void PrintTo(const ParseCase& c, std::ostream* os) { *os << '"' << c.text << '"'; }

class ParseByteSizeTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ParseByteSizeTest, ParsesToBytes) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(GetParam().text);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, GetParam().bytes);
}

INSTANTIATE_TEST_SUITE_P(Units, ParseByteSizeTest,
                         ::testing::Values(ParseCase{"4096", 4096},          // no unit: bytes
                                           ParseCase{"0", 0},                //
                                           ParseCase{"7B", 7},               //
                                           ParseCase{"2K", 2 * kKiB},        // one-letter units
                                           ParseCase{"512M", 512 * kMiB},    //
                                           ParseCase{"8G", 8 * kGiB},        //
                                           ParseCase{"2T", 2 * kTiB},        //
                                           ParseCase{"3KB", 3 * kKiB},       // "KB" is binary too
                                           ParseCase{"3MB", 3 * kMiB},       //
                                           ParseCase{"3GB", 3 * kGiB},       //
                                           ParseCase{"3TB", 3 * kTiB},       //
                                           ParseCase{"16KiB", 16 * kKiB},    // IEC units
                                           ParseCase{"512MiB", 512 * kMiB},  //
                                           ParseCase{"6GiB", 6 * kGiB},      //
                                           ParseCase{"1TiB", kTiB},          //
                                           ParseCase{"6gib", 6 * kGiB},      // units ignore case
                                           ParseCase{"6gIb", 6 * kGiB},      //
                                           ParseCase{"6 GiB", 6 * kGiB},  // space before the unit
                                           ParseCase{"  6GiB\t",
                                                     6 * kGiB},  // surrounding whitespace
                                           ParseCase{"1.5 GiB", kGiB + kGiB / 2},  // fractions
                                           ParseCase{"0.5K", 512},                 //
                                           ParseCase{".5K", 512},        // no leading digit
                                           ParseCase{"1.0000001", 1}));  // rounds to a whole byte

class ParseByteSizeRejectsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParseByteSizeRejectsTest, InvalidArgumentNamingTheText) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(GetParam());
  ASSERT_FALSE(bytes.ok()) << GetParam() << " parsed as " << *bytes;
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.status().message(), HasSubstr("'" + GetParam() + "'"));
}

INSTANTIATE_TEST_SUITE_P(NotSizes, ParseByteSizeRejectsTest,
                         ::testing::Values("",         // nothing
                                           "   ",      // only whitespace
                                           "GiB",      // a unit without a number
                                           "abc",      // words
                                           "6XB",      // an unknown unit
                                           "6 GiBs",   // trailing junk after the unit
                                           "6 GiB 2",  // two numbers
                                           "-1G",      // negative
                                           "1.2.3M",   // two decimal points
                                           "1e3",      // exponents are not sizes
                                           "6 Gi B",   // a unit broken in two
                                           "."));      // a point without digits

// A size too large for int64 is refused rather than wrapped around.
TEST(ParseByteSizeTest, RejectsSizeThatDoesNotFitInt64) {
  absl::StatusOr<int64_t> bytes = ParseByteSize("100000000TiB");
  ASSERT_FALSE(bytes.ok()) << "parsed as " << *bytes;
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
}

struct FormatCase {
  int64_t bytes;
  std::string text;
};

void PrintTo(const FormatCase& c, std::ostream* os) { *os << c.bytes; }

class FormatByteSizeTest : public ::testing::TestWithParam<FormatCase> {};

TEST_P(FormatByteSizeTest, FormatsForPeople) {
  EXPECT_EQ(FormatByteSize(GetParam().bytes), GetParam().text);
}

INSTANTIATE_TEST_SUITE_P(Sizes, FormatByteSizeTest,
                         ::testing::Values(FormatCase{0, "0 B"},               //
                                           FormatCase{1023, "1023 B"},         // below 1 KiB
                                           FormatCase{1024, "1 KiB"},          //
                                           FormatCase{10 * kKiB, "10 KiB"},    //
                                           FormatCase{kMiB, "1 MiB"},          //
                                           FormatCase{512 * kMiB, "512 MiB"},  //
                                           FormatCase{kGiB, "1.0 GiB"},        // GiB keep a decimal
                                           FormatCase{6 * kGiB, "6.0 GiB"},    //
                                           FormatCase{static_cast<int64_t>(5.8 * kGiB),
                                                      "5.8 GiB"},                 //
                                           FormatCase{2 * kTiB, "2048.0 GiB"}));  // no TiB unit

TEST(FormatByteSizeTest, OutputParsesBackToTheSameSize) {
  for (int64_t bytes : {int64_t{0}, int64_t{100}, 4 * kKiB, 512 * kMiB, 6 * kGiB}) {
    absl::StatusOr<int64_t> parsed = ParseByteSize(FormatByteSize(bytes));
    ASSERT_TRUE(parsed.ok()) << FormatByteSize(bytes) << ": " << parsed.status();
    EXPECT_EQ(*parsed, bytes) << FormatByteSize(bytes);
  }
}

}  // namespace
}  // namespace distcc_cuda
