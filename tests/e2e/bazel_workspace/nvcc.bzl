# SPDX-License-Identifier: Apache-2.0
# nvcc_object: runs /usr/local/cuda/bin/nvcc directly (no shell, no cc toolchain) to make one .o.

NVCC = "/usr/local/cuda/bin/nvcc"

def _nvcc_object_impl(ctx):
    src = ctx.file.srcs
    out = ctx.actions.declare_file(ctx.label.name + ".o")
    args = ctx.actions.args()
    args.add_all(ctx.attr.copts)
    args.add("-c", src)
    args.add("-o", out)
    ctx.actions.run(
        executable = NVCC,
        arguments = [args],
        env = {"PATH": "/usr/bin:/bin"},
        inputs = [src] + ctx.files.hdrs,
        outputs = [out],
        mnemonic = "NvccCompile",
        progress_message = "nvcc %s" % src.short_path,
    )
    return [DefaultInfo(files = depset([out]))]

nvcc_object = rule(
    implementation = _nvcc_object_impl,
    attrs = {
        "srcs": attr.label(allow_single_file = [".cu"], mandatory = True),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "copts": attr.string_list(),
    },
)
