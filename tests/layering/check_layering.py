#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the include structure of the tree (docs/design.md, "Layout").

1. A folder includes only from the folders below it: common/base from
   nothing else of ours, then store, process, nvcc and transport (each its
   own library, common/CMakeLists.txt), the worker from common/ only, the
   coordinator's folders (memory, trust, toolkits, then scheduler, planning,
   services, reapi, dashboard; coordinator/CMakeLists.txt) each from common/
   and those before it, the client's (toolkit, plan, scan, text, cluster,
   stages, launcher; client/CMakeLists.txt) likewise, the coordinator and
   the worker under client/cluster. A folder with sources that is not listed
   is an error: it would never be checked.
2. No two files include each other, directly or through others, where a
   file is a header with its .cc (build_plan.h and build_plan.cc are one):
   a cycle means a type lives in the wrong file. X_internal.h belongs to X.

Usage: check_layering.py SOURCE_DIR. Prints each violation with its file and
line and exits 1 when there is one. check_layering.py --self-test checks
that a tree with each kind of violation is refused.
"""
import os
import re
import sys
import tempfile

COMMON = {"common/base", "common/store", "common/process", "common/nvcc",
          "common/transport", "common/reapi"}


def above(*folders):
    """What a folder above `folders` may include: them and all they may."""
    allowed = set()
    for folder in folders:
        allowed |= {folder} | ALLOWED[folder]
    return allowed


# What each folder may include, besides itself, lowest first.
ALLOWED = {
    "common/base": set(),
    "common/store": {"common/base"},
    "common/process": {"common/base", "common/store"},
    "common/nvcc": {"common/base", "common/store", "common/process"},
    "common/transport": {"common/base", "common/store"},
    "common/reapi": {"common/base", "common/store", "common/transport"},
    "worker": set(COMMON),
    "coordinator/memory": set(COMMON),
    "coordinator/trust": set(COMMON),
    "coordinator/toolkits": set(COMMON),
}
ALLOWED["coordinator/scheduler"] = above("coordinator/memory", "coordinator/trust")
ALLOWED["coordinator/planning"] = above("coordinator/scheduler")
ALLOWED["coordinator/services"] = above("coordinator/planning")
ALLOWED["coordinator/reapi"] = above("coordinator/services")
ALLOWED["coordinator/dashboard"] = above("coordinator/scheduler")
ALLOWED["coordinator"] = above("coordinator/reapi", "coordinator/dashboard",
                               "coordinator/toolkits")
ALLOWED["client/toolkit"] = COMMON - {"common/reapi"}
ALLOWED["client/plan"] = set(COMMON)
ALLOWED["client/scan"] = above("client/plan")
ALLOWED["client/text"] = set(COMMON)
ALLOWED["client/cluster"] = above("client/plan", "coordinator", "worker")
ALLOWED["client/stages"] = above("client/scan", "client/text", "client/cluster")
ALLOWED["client/launcher"] = above("client/scan", "client/text", "client/cluster",
                                   "client/toolkit")
ALLOWED["client"] = above("client/stages", "client/launcher")
# Where sources live: every folder below these must be one of ALLOWED.
ROOTS = ("common", "coordinator", "worker", "client")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(path):
    for folder in sorted(ALLOWED, key=len, reverse=True):
        if path.startswith(folder + "/"):
            return folder
    return None


def unknown_folders(root):
    """Folders holding sources that ALLOWED does not name: never checked."""
    errors = []
    for top in ROOTS:
        for folder, _, files in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(folder, root)
            if rel not in ALLOWED and any(f.endswith((".cc", ".h")) for f in files):
                errors.append(f"{rel}/: sources in a folder check_layering.py does not know: "
                              "add it to ALLOWED with what it may include")
    return errors


def read_includes(root):
    """{path: [(line number, included path)]} for every source we own."""
    includes = {}
    for folder in ALLOWED:
        base = os.path.join(root, folder)
        if not os.path.isdir(base):
            continue
        for name in sorted(os.listdir(base)):
            if not name.endswith((".cc", ".h")):
                continue
            path = f"{folder}/{name}"
            with open(os.path.join(root, path), encoding="utf-8") as f:
                found = []
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and folder_of(m.group(1)):
                        found.append((number, m.group(1)))
                includes[path] = found
    return includes


def layering_errors(includes):
    errors = []
    for path, found in includes.items():
        mine = folder_of(path)
        for number, target in found:
            theirs = folder_of(target)
            if theirs != mine and theirs not in ALLOWED[mine]:
                errors.append(f"{path}:{number}: includes {target}, but "
                              f"{mine}/ may include only from "
                              f"{', '.join(sorted(ALLOWED[mine])) or 'itself'}")
            if target not in includes:
                errors.append(f"{path}:{number}: includes {target}, "
                              "which is not in the tree")
    return errors


def file_of(path):
    """The file a path belongs to: its name without extension or _internal."""
    node = os.path.splitext(path)[0]
    return node[:-len("_internal")] if node.endswith("_internal") else node


def cycle_errors(includes):
    """Every cycle among the files (a header with its .cc)."""
    graph = {}
    for path, found in includes.items():
        node = file_of(path)
        edges = graph.setdefault(node, [])
        for _, target in found:
            other = file_of(target)
            if other != node and other not in edges:
                edges.append(other)
    errors, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt):] + [nxt]
                errors.append("include cycle: " + " -> ".join(cycle))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return errors


def self_test():
    """A small tree with one violation of each kind must give exactly those."""
    tree = {
        "common/base/a.h": '#include "common/store/b.h"\n',
        "common/store/b.h": '#include "common/base/c.h"\n',
        "common/base/c.h": "",
        "client/x.h": '#include "client/y.h"\n',
        "client/y.h": "",
        "client/y.cc": '#include "client/x.h"\n#include "worker/w.h"\n',
        "worker/w.h": '#include "client/x.h"\n',
        "coordinator/ok.cc": '#include "coordinator/ok_internal.h"\n',
        "coordinator/ok_internal.h": '#include "coordinator/ok.h"\n',
        "coordinator/ok.h": '#include "common/nvcc/missing.h"\n',
        "coordinator/unlisted/z.h": "",
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in tree.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        includes = read_includes(root)
        errors = unknown_folders(root) + layering_errors(includes) + cycle_errors(includes)
    expected = [
        "coordinator/unlisted/: sources in a folder check_layering.py does not know",
        "common/base/a.h:1: includes common/store/b.h",
        "worker/w.h:1: includes client/x.h",
        "coordinator/ok.h:1: includes common/nvcc/missing.h, which is not",
        "include cycle: client/x -> client/y -> client/x",
        "include cycle: client/x -> client/y -> worker/w -> client/x",
    ]
    missing = [e for e in expected if not any(x.startswith(e) for x in errors)]
    if missing or len(errors) != len(expected):
        print("self-test failed; expected:", *expected, "got:", *errors, sep="\n  ")
        return 1
    print(f"self-test: {len(errors)} violations found as expected")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        sys.exit("usage: check_layering.py SOURCE_DIR")
    includes = read_includes(sys.argv[1])
    if not includes:
        sys.exit(f"no sources found under {sys.argv[1]}")
    errors = unknown_folders(sys.argv[1]) + layering_errors(includes) + cycle_errors(includes)
    for error in errors:
        print(error)
    print(f"{len(includes)} files checked, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
