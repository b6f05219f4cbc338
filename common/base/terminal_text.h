// SPDX-License-Identifier: Apache-2.0
// Text that came from another machine, made safe to print on a terminal:
// a coordinator or worker that is buggy or hostile must not be able to move
// the cursor, rewrite what the user reads, retitle the window or hide text
// with escape sequences.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace distcc_cuda {

// `text` with every byte that a terminal could act on written as "\xNN":
// C0 controls and DEL (a line break too, unless `keep_newlines`), bytes that
// are not well-formed UTF-8, the C1 controls U+0080..U+009F and the
// bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069).
// Printable ASCII and other well-formed UTF-8 (a name in Greek, an arrow)
// stay as they are. At most `max_bytes` of `text` are read; a longer text
// ends in "...".
std::string TerminalSafe(absl::string_view text, bool keep_newlines = false,
                         size_t max_bytes = 4096);

// Whether TerminalSafe would leave `text` as it is (no line breaks kept):
// text a peer sent that may be shown or logged without cleaning.
bool IsTerminalSafe(absl::string_view text);

}  // namespace distcc_cuda
