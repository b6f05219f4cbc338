// SPDX-License-Identifier: Apache-2.0
#include "common/base/terminal_text.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace distcc_cuda {
namespace {

// The length of the well-formed UTF-8 sequence at `text[i]` (2 to 4) and
// its code point, or 0 for a byte that does not start one.
int Utf8Sequence(absl::string_view text, size_t i, uint32_t& code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  int length = 0;
  uint32_t lowest = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, code_point = lead & 0x1f, lowest = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, code_point = lead & 0x0f, lowest = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, code_point = lead & 0x07, lowest = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (int k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3f);
  }
  // Overlong forms, surrogates and code points past Unicode's end.
  if (code_point < lowest || (code_point >= 0xd800 && code_point <= 0xdfff) ||
      code_point > 0x10ffff) {
    return 0;
  }
  return length;
}

bool ActsOnTheTerminal(uint32_t code_point) {
  return (code_point >= 0x80 && code_point <= 0x9f) ||
         (code_point >= 0x202a && code_point <= 0x202e) ||
         (code_point >= 0x2066 && code_point <= 0x2069);
}

}  // namespace

std::string TerminalSafe(absl::string_view text, bool keep_newlines, size_t max_bytes) {
  const bool cut = text.size() > max_bytes;
  if (cut) text = text.substr(0, max_bytes);
  std::string safe;
  safe.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c >= 0x20 && c < 0x7f) || (c == '\n' && keep_newlines)) {
      safe.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    uint32_t code_point = 0;
    const int length = c >= 0x80 ? Utf8Sequence(text, i, code_point) : 0;
    if (length > 0 && !ActsOnTheTerminal(code_point)) {
      safe.append(text.data() + i, length);
      i += length;
      continue;
    }
    // The whole sequence of a code point that acts on the terminal, or one
    // stray byte.
    for (int k = 0; k < (length > 0 ? length : 1); ++k) {
      absl::StrAppendFormat(&safe, "\\x%02x", static_cast<unsigned char>(text[i + k]));
    }
    i += length > 0 ? length : 1;
  }
  if (cut) safe += "...";
  return safe;
}

bool IsTerminalSafe(absl::string_view text) {
  return TerminalSafe(text, /*keep_newlines=*/false, text.size()) == text;
}

}  // namespace distcc_cuda
