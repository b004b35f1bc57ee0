#!/usr/bin/env python3
"""Turns the ```cpp blocks of chorus's Markdown docs into translation units
that the build compiles, so a documented call that stops compiling fails
the build (tests/docs/CMakeLists.txt).

Every ```cpp block must be preceded (on the line before the fence, blank
lines allowed) by an HTML comment that says how to check it; a block
without one is an error, so new examples cannot slip past:

  <!-- check: scope -->        namespace-scope declarations; the later
                               blocks of the same file see them
  <!-- check: body -->         statements: the body of a function with
                               `chorus::communicator<chorus::threads>& comm`,
                               `const int r` (its rank) and `const int n`
                               (the rank count) in scope
  <!-- check: body | CODE -->  the same, CODE (declarations the snippet
                               assumes) placed before it
  <!-- check: mpi | CODE -->   a body in the MPI translation unit (no `comm`
                               given; <chorus/mpi.hpp> included)
  <!-- check: cuda | CODE -->  a body in the CUDA translation unit (built
                               by nvcc; <chorus/gpu.hpp> included)
  <!-- check: skip: WHY -->    not compiled (a synopsis, pseudo-code)

`#include` lines of a block go to the top of its translation unit.

usage: doc_blocks.py OUT_DIR SOURCE_ROOT DOC.md...
Writes OUT_DIR/<doc>_host.cpp, <doc>_mpi.cpp and <doc>_cuda.cu (each
only when the doc has such blocks) and prints their paths, one per line.
"""

import os
import re
import sys

CHECK = re.compile(r"^<!--\s*check:\s*(scope|body|mpi|cuda|skip)\s*(?:[:|]\s*(.*?))?\s*-->\s*$")

HEADERS = {
    "host": ["<chorus/chorus.hpp>", "<chorus/train.hpp>"],
    "mpi": ["<chorus/mpi.hpp>", "<chorus/train.hpp>"],
    "cuda": ["<chorus/gpu.hpp>"],
}
STD = ["<array>", "<chrono>", "<cmath>", "<cstddef>", "<cstdint>", "<cstdio>", "<functional>",
       "<memory>", "<span>", "<string>", "<vector>"]


def blocks(path):
    """(line number, kind, extra, code) of every ```cpp block of `path`."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```cpp":
            fence = i
            j = i - 1
            while j >= 0 and lines[j].strip() == "":
                j -= 1
            m = CHECK.match(lines[j].strip()) if j >= 0 else None
            k = i + 1
            while k < len(lines) and lines[k].strip() != "```":
                k += 1
            if k == len(lines):
                sys.exit(f"{path}:{fence + 1}: ```cpp block without a closing fence")
            if m is None:
                sys.exit(f"{path}:{fence + 1}: ```cpp block without a '<!-- check: ... -->' comment "
                         "on the line before it (tests/docs/doc_blocks.py says which)")
            out.append((fence + 1, m.group(1), m.group(2) or "", "\n".join(lines[fence + 1:k])))
            i = k + 1
        else:
            i += 1
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out_dir, root = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    for doc in sys.argv[3:]:
        rel = os.path.relpath(doc, root)
        stem = re.sub(r"[^A-Za-z0-9]", "_", rel)
        units = {"host": [], "mpi": [], "cuda": []}
        includes = {"host": [], "mpi": [], "cuda": []}
        scope = []  # namespace-scope blocks so far: every later unit of this doc sees them
        for line, kind, extra, code in blocks(doc):
            if kind == "skip":
                continue
            unit = "host" if kind == "body" else kind
            body = []
            for text in code.split("\n"):
                if not text.startswith("#include"):
                    body.append(text)
                    continue
                body.append("")  # keeps #line numbering right
                if kind == "scope":  # every unit of this doc sees the scope blocks
                    for u in includes:
                        includes[u].append(text)
                else:
                    includes[unit].append(text)
            where = f'#line {line + 1} "{rel}"'
            if kind == "scope":
                scope.append((where, "\n".join(body)))
                continue
            n = len(units[unit])
            if unit == "host":
                head = ("void doc_block_%d(chorus::communicator<chorus::threads>& comm) {\n"
                        "    const int r = comm.rank();\n    const int n = comm.size();\n"
                        "    (void)r;\n    (void)n;\n" % n)
            else:
                head = "void doc_block_%d() {\n" % n
            units[unit].append((len(scope), head + "    " + extra + "\n" + where + "\n" + "\n".join(body) + "\n}\n"))
        for unit, items in units.items():
            if not items and not (unit == "host" and scope):
                continue
            ext = "cu" if unit == "cuda" else "cpp"
            path = os.path.join(out_dir, f"{stem}_{unit}.{ext}")
            text = [f"// generated by tests/docs/doc_blocks.py from {rel}: do not edit"]
            text += [f"#include {h}" for h in HEADERS[unit] + STD]
            text += sorted(set(includes[unit]))
            text.append("namespace doc {")
            done = 0
            for seen, fn in items:
                for where, decl in scope[done:seen]:
                    text += [where, decl]
                done = seen
                text.append(fn)
            if unit == "host":  # scope blocks after the last body still compile
                for where, decl in scope[done:]:
                    text += [where, decl]
            text.append("} // namespace doc")
            content = "\n".join(text) + "\n"
            old = None
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    old = f.read()
            if old != content:  # unchanged files keep their time stamps: no rebuild
                with open(path, "w", encoding="utf-8") as f:
                    f.write(content)
            print(path)


if __name__ == "__main__":
    main()
