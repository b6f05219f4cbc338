#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Trims flash-attention's source distribution to a build this machine can
finish in minutes: the forward kernels (plain and split-KV, fp16 and bf16,
causal or not) of head dimension 64, 8 .cu units, plus flash_api.cpp.

flash_api.cpp dispatches on every head dimension; HEADDIM_SWITCH is cut to
64, and the backward kernels of head dimension 64 (which run_mha_bwd still
names) become stubs in a host-only file, so the module links and imports.
Its -std=c++17 becomes -std=c++20, which the headers of torch 2.10 and
later need. Everything else is flash-attention's own setup.py, flags and
sources.

Usage: trim.py SOURCE_DIR (the unpacked flash_attn-*.tar.gz), in place.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
setup = root / "setup.py"
text = setup.read_text()

kept = []


def keep(match):
    name = match.group(1)
    if name == "csrc/flash_attn/flash_api.cpp":
        kept.append(name)
        return match.group(0)
    base = pathlib.Path(name).name
    if re.fullmatch(r"flash_fwd(_split)?_hdim64_(fp16|bf16)(_causal)?_sm80\.cu", base):
        kept.append(name)
        return match.group(0)
    return ""


# The sources of the flash_attn_2_cuda extension: one quoted path a line.
text, count = re.subn(r'^\s*"(csrc/flash_attn/[^"]+\.(?:cu|cpp))",\n', keep, text, flags=re.M)
assert count > 50, f"only {count} sources matched: has setup.py changed?"
text = text.replace('"csrc/flash_attn/flash_api.cpp",',
                    '"csrc/flash_attn/flash_api.cpp",\n                "csrc/flash_attn/bench_stubs.cpp",', 1)
# torch 2.10 and later need C++20 in their headers; flash-attention 2.8.3
# still asks for C++17 (its own code builds as C++20 too).
text = text.replace('"-std=c++17"', '"-std=c++20"')
setup.write_text(text)

switch = root / "csrc/flash_attn/src/static_switch.h"
s = switch.read_text()
start = s.index("#define HEADDIM_SWITCH(HEADDIM, ...)")
end = s.index("}()", start) + 3
s = s[:start] + ("#define HEADDIM_SWITCH(HEADDIM, ...)   \\\n  [&] {                                    \\\n"
                 "    constexpr static int kHeadDim = 64;  \\\n    return __VA_ARGS__();                \\\n"
                 "  }()") + s[end:]
switch.write_text(s)

(root / "csrc/flash_attn/bench_stubs.cpp").write_text("""// Written by distcc-cuda's bench/flash_attention/trim.py: the backward
// kernels this trimmed build leaves out, so that the module links.
#include <cstdlib>
#include <cuda_runtime_api.h>
#include "src/flash.h"
#include "cutlass/numeric_types.h"
namespace FLASH_NAMESPACE {
template <> void run_mha_bwd_<cutlass::half_t, 64, false>(Flash_bwd_params &, cudaStream_t) { std::abort(); }
template <> void run_mha_bwd_<cutlass::half_t, 64, true>(Flash_bwd_params &, cudaStream_t) { std::abort(); }
template <> void run_mha_bwd_<cutlass::bfloat16_t, 64, false>(Flash_bwd_params &, cudaStream_t) { std::abort(); }
template <> void run_mha_bwd_<cutlass::bfloat16_t, 64, true>(Flash_bwd_params &, cudaStream_t) { std::abort(); }
}  // namespace FLASH_NAMESPACE
""")
print(f"kept {len(kept)} sources: " + ", ".join(pathlib.Path(k).name for k in kept))
