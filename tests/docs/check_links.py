#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the links between the project's Markdown pages.

Every relative link in README.md, docs/*.md and deploy/**/*.md must name a
file of the tree, and a link with an anchor (`page.md#section`, `#section`)
a heading of that page, spelled as GitHub makes its anchors. The README
must stay a page a newcomer reads in five minutes (at most 400 lines).

  check_links.py ROOT        check the tree; exits 1 naming each bad link
  check_links.py --self-test check the checker on a made-up tree
"""
import os
import re
import sys
import tempfile

README_MAX_LINES = 400
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchor_of(heading):
    """GitHub's anchor for a heading: lower case, punctuation out, spaces to -."""
    text = heading.lstrip("#").strip().lower()
    text = re.sub(r"[^a-z0-9 _-]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(text):
    fence = False
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield number, line


def anchors_of(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen = {}
    anchors = set()
    for _, line in lines_outside_code(text):
        if re.match(r"#{1,6} ", line):
            base = anchor_of(line)
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchors.add(base if count == 0 else f"{base}-{count}")
    return anchors


def pages(root):
    found = [os.path.join(root, "README.md")]
    for folder in ("docs", "deploy"):
        for top, _, files in os.walk(os.path.join(root, folder)):
            found += [os.path.join(top, f) for f in sorted(files) if f.endswith(".md")]
    return [p for p in found if os.path.isfile(p)]


def check_page(page, root):
    problems = []
    with open(page, encoding="utf-8") as f:
        text = f.read()
    rel = os.path.relpath(page, root)
    for number, line in lines_outside_code(text):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(resolved):
                problems.append(f"{rel}:{number}: link to {target}: no file {path}")
                continue
            if anchor and resolved.endswith(".md") and anchor not in anchors_of(resolved):
                problems.append(f"{rel}:{number}: link to {target}: no heading #{anchor} there")
    return problems


def check(root):
    problems = []
    for page in pages(root):
        problems += check_page(page, root)
    readme = os.path.join(root, "README.md")
    with open(readme, encoding="utf-8") as f:
        lines = f.read().count("\n")
    if lines > README_MAX_LINES:
        problems.append(f"README.md: {lines} lines, more than {README_MAX_LINES}: "
                        "move the detail to a page under docs/ and link it")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "docs", "a.md"), "w") as f:
            f.write("# A page\n\n## The `x` part: one\n\n```\n## not a heading\n```\n")
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("[ok](docs/a.md) [ok](docs/a.md#the-x-part-one) [web](https://x.org/a)\n"
                    "[gone](docs/b.md) [bad](docs/a.md#not-a-heading)\n"
                    "```\n[in code](nowhere.md)\n```\n")
        problems = check(root)
        assert len(problems) == 2, problems
        assert "no file docs/b.md" in problems[0], problems
        assert "no heading #not-a-heading" in problems[1], problems
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("line\n" * (README_MAX_LINES + 1))
        problems = check(root)
        assert len(problems) == 1 and "more than 400" in problems[0], problems
    print("self-test passed")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for problem in problems:
        print(problem)
    print(f"{len(pages(sys.argv[1]))} pages checked, {len(problems)} bad links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
