#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Finds names private to a file that another file of its library also uses.

The wheel and the images build with CMAKE_UNITY_BUILD (pyproject.toml): the
.cc files of one library are compiled several at a time as one translation
unit, so two files that each define `bool Word(char)` in an anonymous
namespace, or a `static` function of one name, no longer compile. The
ordinary build compiles each file alone and never sees it; without this
check the first to notice is the image build, half an hour into CI.

A private name is one defined at the top level of an anonymous namespace
(functions, variables, types, aliases) or a `static` function or variable
at namespace scope. The check relies on the tree's clang-format style:
namespace contents are not indented, so a top-level definition starts in
column 0. A library is a folder (common/base, ..., coordinator/scheduler,
..., worker, client/scan, ...), which is stricter than the real batches: a collision in one
folder is a trap for the next file that lands in the same batch.

A private function may also hide a public one of the same name that a
header of ours declares in an enclosing namespace: alone, the file never
calls the public one, but in a batch with a file that does, that call
finds the private overload first and no longer compiles. Those are
reported too.

Usage: check_unity.py SOURCE_DIR prints each collision and exits 1 when
there is one; check_unity.py --self-test checks that collisions of each
kind are found and that look-alikes are not.
"""
import os
import re
import sys
import tempfile

LIBRARIES = ["common/base", "common/store", "common/process", "common/nvcc",
             "common/transport", "common/reapi", "coordinator", "coordinator/memory",
             "coordinator/trust", "coordinator/toolkits", "coordinator/scheduler",
             "coordinator/planning", "coordinator/services", "coordinator/reapi",
             "coordinator/dashboard", "worker", "client", "client/toolkit", "client/plan",
             "client/scan", "client/text", "client/cluster", "client/stages",
             "client/launcher"]

NAMESPACE_OPEN = re.compile(r"^namespace\s*([\w:]*)\s*\{")
NAMESPACE_CLOSE = re.compile(r"^\}\s*//\s*namespace")  # clang-format writes the comment
TYPE = re.compile(r"^(?:struct|class|union|enum(?:\s+class)?)\s+(\w+)\s*(?:final\s*)?[:{]")
ALIAS = re.compile(r"^using\s+(\w+)\s*=")
# The declared name is the last identifier before the first '(' (a
# function), or before '=', '[' or '{' (a variable).
FUNCTION = re.compile(r"(\w+)\s*\(")
VARIABLE = re.compile(r"(\w+)\s*(?:\[[^\]]*\])?\s*(?:=|\{)")
SKIP = ("//", "#", "}", "template", "extern", "namespace", "using namespace",
        "ABSL_FLAG", "TEST", "static_assert", "friend", "return")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "decltype",
            "alignof", "operator", "static_assert", "ABSL_FLAG"}


def statement_at(lines, index):
    """The statement starting at lines[index], up to its first '{' or ';'."""
    text = ""
    for line in lines[index:index + 8]:
        text += " " + line.split("//")[0].strip()
        if "{" in line or ";" in line:
            break
    return text.strip()


def declared_name(statement):
    """The name a top-level statement defines, or None for a declaration."""
    for pattern in (TYPE, ALIAS):
        m = pattern.match(statement)
        if m:
            return m.group(1)
    paren = statement.find("(")
    assign = min((i for i in (statement.find(c) for c in "=[{") if i >= 0),
                 default=-1)
    if paren >= 0 and (assign < 0 or paren < assign):
        head = statement[:paren + 1]
        names = [n for n in FUNCTION.findall(head) if n not in KEYWORDS]
        body = statement.rstrip()
        if not names or body.endswith(";") and "{" not in body:
            return None  # a declaration; the definition is what collides
        return names[-1]
    m = VARIABLE.search(statement)
    return m.group(1) if m and m.group(1) not in KEYWORDS else None


def private_names(text):
    """[(line number, scope, name)] of the names private to one file."""
    lines = text.splitlines()
    found, scopes, anonymous = [], [], []
    for index, line in enumerate(lines):
        opened = NAMESPACE_OPEN.match(line)
        if opened:
            scopes.append(opened.group(1))
            anonymous.append(opened.group(1) == "")
            continue
        if NAMESPACE_CLOSE.match(line) and scopes:
            scopes.pop()
            anonymous.pop()
            continue
        if not line or line[0].isspace() or line.startswith(SKIP):
            continue
        is_static = line.startswith("static ")
        if not (anonymous and anonymous[-1]) and not (is_static and scopes):
            continue
        name = declared_name(statement_at(lines, index))
        if name:
            scope = "::".join(s for s in scopes if s)
            found.append((index + 1, scope, name))
    return found


def public_functions(root):
    """{(scope, name): header} of the functions our headers declare."""
    found = {}
    for library in LIBRARIES:
        base = os.path.join(root, library)
        if not os.path.isdir(base):
            continue
        for name in sorted(os.listdir(base)):
            if not name.endswith(".h"):
                continue
            path = f"{library}/{name}"
            with open(os.path.join(root, path), encoding="utf-8") as f:
                lines = f.read().splitlines()
            scopes = []
            for index, line in enumerate(lines):
                opened = NAMESPACE_OPEN.match(line)
                if opened:
                    scopes.append(opened.group(1))
                elif NAMESPACE_CLOSE.match(line) and scopes:
                    scopes.pop()
                elif (line and not line[0].isspace() and not line.startswith(SKIP)
                      and scopes and all(scopes)):
                    statement = statement_at(lines, index)
                    paren = statement.find("(")
                    names = [n for n in FUNCTION.findall(statement[:paren + 1])
                             if n not in KEYWORDS] if paren >= 0 else []
                    if names:
                        found.setdefault(("::".join(scopes), names[-1]), path)
    return found


def hidden_public(public, scope, name):
    """The header whose function `name` a private one in `scope` hides."""
    for (outer, public_name), header in public.items():
        if public_name == name and (scope == outer or scope.startswith(outer + "::")):
            return header
    return None


def collisions(root):
    """Each private name that two files of one library define."""
    errors, files = [], 0
    public = public_functions(root)
    for library in LIBRARIES:
        base = os.path.join(root, library)
        if not os.path.isdir(base):
            continue
        seen = {}
        for name in sorted(os.listdir(base)):
            if not name.endswith(".cc") or name == "main.cc":
                continue  # main.cc is an executable of its own, not batched
            files += 1
            path = f"{library}/{name}"
            with open(os.path.join(root, path), encoding="utf-8") as f:
                for number, scope, private in private_names(f.read()):
                    header = hidden_public(public, scope, private)
                    if header:
                        errors.append(
                            f"{path}:{number}: '{private}' hides the function "
                            f"{header} declares; in a unity batch with a file "
                            "that calls that one, the call finds this one; "
                            "rename it or use the public one")
                    key = (scope, private)
                    first = seen.setdefault(key, (path, number))
                    if first[0] != path:
                        errors.append(
                            f"{path}:{number}: '{private}' is also defined in "
                            f"{first[0]}:{first[1]}; a unity build compiles "
                            f"{library}/ together, so rename one or share it "
                            "through a header")
    return errors, files


def self_test():
    tree = {
        "common/base/a.cc": (
            "namespace distcc_cuda {\nnamespace {\n\n"
            "bool Word(char c) { return c == '_'; }\n"
            "constexpr int kLimit = 3;\n"
            "struct Entry {\n  int x;\n};\n"
            "absl::Status Bad(absl::string_view option,\n"
            "                 absl::string_view value) {\n  return {};\n}\n"
            "void Declared(int);\n"
            "}  // namespace\n\n"
            "void Public() {}\n"
            "static int Counter() { return 1; }\n"
            "}  // namespace distcc_cuda\n"),
        "common/base/b.cc": (
            "namespace distcc_cuda {\nnamespace {\n\n"
            "bool Word(char c) {\n  return c == '-';\n}\n"
            "const char* const kLimit[] = {\"a\"};\n"
            "using Entry = int;\n"
            "absl::Status Bad(int x) { return {}; }\n"
            "void Declared(int) {}\n"
            "}  // namespace\n\n"
            "void Public() {}\n"
            "static int Counter() { return 2; }\n"
            "}  // namespace distcc_cuda\n"),
        # Hides a public function of an enclosing namespace, and one that
        # lives in a sibling namespace (which hides nothing).
        "common/store/tree.h": (
            "namespace distcc_cuda {\n"
            "absl::StatusOr<Tree> BuildTree(\n    const Files& files);\n"
            "}  // namespace distcc_cuda\n"
            "namespace distcc_cuda::worker {\nvoid Cancelled();\n"
            "}  // namespace distcc_cuda::worker\n"),
        "client/launch.cc": (
            "namespace distcc_cuda::client {\nnamespace {\n"
            "absl::Status BuildTree(Unit& unit) { return {}; }\n"
            "bool Cancelled() { return false; }\n"
            "}  // namespace\n}  // namespace distcc_cuda::client\n"),
        # The same names in another library or another named namespace.
        "common/store/c.cc": (
            "namespace distcc_cuda {\nnamespace {\n"
            "bool Word(char c) { return true; }\n}  // namespace\n"
            "}  // namespace distcc_cuda\n"),
        "common/base/d.cc": (
            "namespace distcc_cuda::other {\nnamespace {\n"
            "bool Word(char c) { return true; }\n}  // namespace\n"
            "}  // namespace distcc_cuda::other\n"),
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in tree.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        errors, _ = collisions(root)
    expected = ["common/base/b.cc:4: 'Word'", "common/base/b.cc:7: 'kLimit'",
                "common/base/b.cc:8: 'Entry'", "common/base/b.cc:9: 'Bad'",
                "common/base/b.cc:14: 'Counter'",
                "client/launch.cc:3: 'BuildTree' hides the function common/store/tree.h"]
    missing = [e for e in expected if not any(x.startswith(e) for x in errors)]
    if missing or len(errors) != len(expected):
        print("self-test failed; expected:", *expected, "got:", *errors, sep="\n  ")
        return 1
    print(f"self-test: {len(errors)} collisions found as expected")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        sys.exit("usage: check_unity.py SOURCE_DIR")
    errors, files = collisions(sys.argv[1])
    if not files:
        sys.exit(f"no sources found under {sys.argv[1]}")
    for error in errors:
        print(error)
    print(f"{files} files checked, {len(errors)} unity-build collisions")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
