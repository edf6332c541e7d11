#!/usr/bin/env python3
"""One direction of dependence between the top-level modules of a crate.

Usage: python3 tools/check_layers.py            (both crates of the runtime)
       python3 tools/check_layers.py SRC [ORDER] (one folder)

Nodes are the top-level modules of a `src/` folder (`x.rs` or `x/`); module
A depends on module B when code in A (comments and string literals removed)
names `crate::B`, `crate::{B, ..}` or an item that `lib.rs` re-exports from
B (`crate::Error` is a path into `error`). Two rules:

* no cycle between top-level modules (every crate);
* where an order is declared (the library's, in LAYERS below and in
  `docs/architecture.md`), a module uses only modules of lower layers: an
  import of a module on the same or a higher layer fails.

The CLI (`src/cli/`, `src/main.rs`) is the binary's, not the library's: its
files may name only the library's public API (`onnx_prepared::..`) and each
other, never `crate::` items of `main.rs` from `cli/`.
The library's and the CLI's functions stay under MAX_FUNCTION_LINES lines
(a function that long is several steps: name them).
Exits 1 on any violation, printing each with its file and line.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_module_cycles import sccs  # noqa: E402  (one strongly-connected-components search)

# Bottom to top. A module may use the modules of the layers below its own.
LAYERS = [
    ["sync", "limits", "durable"],
    ["arena", "store"],
    ["scheduler"],
    ["model"],
    ["cache"],
    ["plan"],
    ["prepare"],
    ["exec"],
    ["error"],
    ["session"],
    ["decoder", "npz"],
]

MAX_FUNCTION_LINES = 120
FN = re.compile(r"\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"\w*\"\s+)?fn\s+\w+")

ITEM = re.compile(r"\bcrate::(\{[^}]*\}|\w+)")


def strip(code):
    """Code without comments and string contents (line numbers kept)."""
    code = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), code, flags=re.S)
    code = code.replace("'\"'", "' '")
    code = re.sub(r'\br(#*)"(.*?)"\1', lambda m: '""' + "\n" * m.group(0).count("\n"), code, flags=re.S)
    code = re.sub(r'"(\\.|[^"\\])*"', lambda m: '""' + "\n" * m.group(0).count("\n"), code, flags=re.S)
    return "\n".join(re.sub(r"//.*", "", l) for l in code.splitlines())


def root_items(src):
    """Names `lib.rs` re-exports at the crate root, mapped to their module."""
    path = os.path.join(src, "lib.rs")
    if not os.path.exists(path):
        return {}
    code = strip(open(path, encoding="utf-8").read())
    items = {}
    for m in re.finditer(r"pub\s+use\s+(\w+)::(\{[^}]*\}|\w+)\s*;", code, flags=re.S):
        module, names = m.group(1), m.group(2).strip("{}")
        for n in names.split(","):
            n = n.strip().split(" as ")[-1].strip()
            if n:
                items[n] = module
    return items


def edges(src, skip=()):
    """(from, to, file, line) for every `crate::` reference between modules."""
    items = root_items(src)
    found = []
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            top = os.path.relpath(path, src).split(os.sep)[0]
            top = top[:-3] if top.endswith(".rs") else top
            if top in ("lib", "main") or top in skip:
                continue
            code = strip(open(path, encoding="utf-8", errors="replace").read())
            for n, line in enumerate(code.splitlines(), 1):
                for m in ITEM.finditer(line):
                    names = m.group(1)
                    if names.startswith("{"):
                        names = [re.match(r"\s*(\w*)", x).group(1) for x in names[1:-1].split(",")]
                    else:
                        names = [names]
                    for name in filter(None, names):
                        target = items.get(name, name)
                        if target != top:
                            found.append((top, target, path, n))
    return found


def check(src, layers=None, skip=()):
    found = edges(src, skip)
    modules = {e[0] for e in found} | {
        (f[:-3] if f.endswith(".rs") else f)
        for f in os.listdir(src)
        if f not in ("lib.rs", "main.rs") and (f.endswith(".rs") or os.path.isdir(os.path.join(src, f)))
    }
    modules -= set(skip)
    graph = {m: set() for m in modules}
    for a, b, _, _ in found:
        if b in modules:
            graph.setdefault(a, set()).add(b)
    bad = 0
    for comp in sorted(sorted(c) for c in sccs(graph)):
        print(f"{src}: import cycle between top-level modules {{{', '.join(comp)}}}")
        bad += 1
    if layers is not None:
        rank = {m: i for i, layer in enumerate(layers) for m in layer}
        for m in sorted(modules - set(rank)):
            print(f"{src}: module `{m}` is in no layer: add it to LAYERS and docs/architecture.md")
            bad += 1
        for a, b, path, line in found:
            if a in rank and b in rank and rank[b] >= rank[a]:
                print(f"{path}:{line}: `{a}` (layer {rank[a]}) uses `{b}` (layer {rank[b]}): "
                      "a module may use only lower layers")
                bad += 1
    return bad


def check_cli(src):
    """`cli/` files name `onnx_prepared::` and `crate::cli`, nothing of main.rs."""
    bad = 0
    cli = os.path.join(src, "cli")
    for root, _, files in os.walk(cli):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            code = strip(open(path, encoding="utf-8").read())
            for n, line in enumerate(code.splitlines(), 1):
                for m in ITEM.finditer(line):
                    names = m.group(1)
                    if names.startswith("{"):
                        names = [re.match(r"\s*(\w*)", x).group(1) for x in names[1:-1].split(",")]
                    else:
                        names = [names]
                    for name in filter(None, names):
                        if name != "cli":
                            print(f"{path}:{n}: the CLI names `crate::{name}` of main.rs: "
                                  "move it into cli/")
                            bad += 1
    return bad


def long_functions(src):
    """Functions of more than MAX_FUNCTION_LINES lines, from `fn` to the
    closing brace (comments and strings removed first)."""
    bad = 0
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            lines = strip(open(path, encoding="utf-8", errors="replace").read()).splitlines()
            i = 0
            while i < len(lines):
                if not FN.match(lines[i]):
                    i += 1
                    continue
                depth, started, j = 0, False, i
                while j < len(lines):
                    depth += lines[j].count("{") - lines[j].count("}")
                    started = started or "{" in lines[j]
                    if (started and depth <= 0) or (not started and lines[j].rstrip().endswith(";")):
                        break
                    j += 1
                if started and j - i + 1 > MAX_FUNCTION_LINES:
                    print(f"{path}:{i + 1}: a function of {j - i + 1} lines "
                          f"(at most {MAX_FUNCTION_LINES}): split it into named steps")
                    bad += 1
                i = j + 1 if started else i + 1
    return bad


def main():
    if len(sys.argv) > 1:
        bad = check(sys.argv[1], LAYERS if len(sys.argv) > 2 and sys.argv[2] == "ORDER" else None)
    else:
        bad = (check("src", LAYERS, skip=("cli",)) + check_cli("src") + check("kernels/src")
               + long_functions("src"))
    print(f"layers: {bad} violation{'s' if bad != 1 else ''}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
