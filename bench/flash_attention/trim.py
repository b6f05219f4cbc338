#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Trims flash-attention's source distribution to a build this machine can
finish in minutes: the first UNITS (1 to 3, default 3) of three kernels that
cost what flash-attention's do (forward hdim64 fp16, forward hdim128 bf16
causal, backward hdim64 fp16), plus flash_api.cpp.

flash_api.cpp dispatches on every head dimension; HEADDIM_SWITCH is cut to
64 and 128, and every kernel it names that this build leaves out (the other
dtypes, causal or not, the split-KV ones, the backward ones) becomes a stub
in a host-only file, so that the module links and imports. Its -std=c++17
becomes -std=c++20, which the headers of torch 2.10 and later need.
Everything else is flash-attention's own setup.py, flags and sources.

Usage: trim.py SOURCE_DIR [UNITS] (the unpacked flash_attn-*.tar.gz), in
place.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
units = int(sys.argv[2]) if len(sys.argv) > 2 else 3
KERNELS = [  # (file, kind, dtype, head dimension, causal)
    ("flash_fwd_hdim64_fp16_sm80.cu", "fwd", "cutlass::half_t", 64, "false"),
    ("flash_fwd_hdim128_bf16_causal_sm80.cu", "fwd", "cutlass::bfloat16_t", 128, "true"),
    ("flash_bwd_hdim64_fp16_sm80.cu", "bwd", "cutlass::half_t", 64, "false"),
]
assert 1 <= units <= len(KERNELS), f"UNITS is 1 to {len(KERNELS)}"
chosen = KERNELS[:units]
setup = root / "setup.py"
text = setup.read_text()

kept = []


def keep(match):
    name = match.group(1)
    base = pathlib.Path(name).name
    if name == "csrc/flash_attn/flash_api.cpp" or base in [k[0] for k in chosen]:
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
                 "    if (HEADDIM <= 64) {                   \\\n"
                 "      constexpr static int kHeadDim = 64;  \\\n      return __VA_ARGS__();                \\\n"
                 "    } else {                               \\\n"
                 "      constexpr static int kHeadDim = 128; \\\n      return __VA_ARGS__();                \\\n"
                 "    }                                      \\\n  }()") + s[end:]
switch.write_text(s)

stubs = []
for kind, function, params in (("fwd", "run_mha_fwd_", "Flash_fwd_params"),
                               ("split", "run_mha_fwd_splitkv_dispatch", "Flash_fwd_params"),
                               ("bwd", "run_mha_bwd_", "Flash_bwd_params")):
    for dtype in ("cutlass::half_t", "cutlass::bfloat16_t"):
        for hdim in (64, 128):
            for causal in ("false", "true"):
                if (kind, dtype, hdim, causal) in [(k[1], k[2], k[3], k[4]) for k in chosen]:
                    continue
                stubs.append(f"template <> void {function}<{dtype}, {hdim}, {causal}>"
                             f"({params} &, cudaStream_t) {{ std::abort(); }}")
(root / "csrc/flash_attn/bench_stubs.cpp").write_text(
    "// Written by distcc-cuda's bench/flash_attention/trim.py: the kernels this\n"
    "// trimmed build leaves out, so that the module links.\n"
    "#include <cstdlib>\n#include <cuda_runtime_api.h>\n#include \"src/flash.h\"\n"
    "#include \"cutlass/numeric_types.h\"\nnamespace FLASH_NAMESPACE {\n" + "\n".join(stubs) +
    "\n}  // namespace FLASH_NAMESPACE\n")
print(f"kept {len(kept)} sources: " + ", ".join(pathlib.Path(k).name for k in kept))
