#!/usr/bin/env python3
"""No import cycle between sibling files of a module.

For every directory module of `src/` (a folder with a `mod.rs`, at any
depth), the nodes are its children: each `x.rs` beside the `mod.rs` and each
sub-folder (everything inside it counts as that child). Child A depends on
child B when code in A names a path into B: `super::b::..`,
`crate::<module>::b::..`, or an item that the module's `mod.rs` re-exports
from B (`pub use b::Item`). The `mod.rs` itself is the module's hub: its
children may use it, so it is not a node. Comment lines are ignored; method
calls on a type defined elsewhere are not edges (the types are named where
they are imported).

Prints each module's dependencies and exits 1 if any module's children form
a cycle. Usage: python3 tools/check_module_cycles.py [src]
"""

import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "src"
PATH = re.compile(r"\b(crate|super|self)((?:::(?:\w+|\{))+)")


def module_of(rel):
    """Module path of a source file relative to ROOT (`a/b/mod.rs` -> [a, b])."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def expand(text, start):
    """Paths of a `use` tree starting at `text[start]` (just after `::`)."""
    cur, i = [], start
    while i < len(text):
        ws = re.match(r"\s*", text[i:]).end()
        i += ws
        if text.startswith("{", i):
            depth, j = 0, i
            while j < len(text):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    break
                j += 1
            out = []
            for item in split_top(text[i + 1 : j]):
                out.extend(cur + tail for tail in expand(item, 0))
            return out
        m = re.match(r"(\w+)", text[i:])
        if not m:
            break
        cur.append(m.group(1))
        i += m.end()
        if not text.startswith("::", i):
            break
        i += 2
    return [cur] if cur else []


def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def references(text, module):
    """Absolute module paths (lists of names) the text mentions."""
    text = "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))
    for m in PATH.finditer(text):
        head = m.group(1)
        for tail in expand(text, m.start(2) + 2):
            if head == "crate":
                yield tail
                continue
            base = list(module) if head == "self" else list(module[:-1])
            while tail and tail[0] == "super":
                base, tail = base[:-1], tail[1:]
            yield base + tail


def main():
    files = {}
    for dirpath, _, names in os.walk(ROOT):
        for n in names:
            if n.endswith(".rs"):
                rel = os.path.relpath(os.path.join(dirpath, n), ROOT)
                files[rel] = open(os.path.join(dirpath, n), encoding="utf-8").read()
    modules = sorted(
        module_of(rel) for rel in files if rel.endswith("mod.rs") and os.sep in rel
    )
    failed = False
    for mod in modules:
        folder = os.path.join(ROOT, *mod)
        children = sorted(
            n[:-3] if n.endswith(".rs") else n
            for n in os.listdir(folder)
            if (n.endswith(".rs") and n != "mod.rs")
            or os.path.isfile(os.path.join(folder, n, "mod.rs"))
        )
        hub = files[os.path.join(*mod, "mod.rs")]
        reexported = {}
        for m in re.finditer(r"pub(?:\([\w:]+\))?\s+use\s+(\w+)::", hub):
            for path in expand(hub, m.start(1)):
                if len(path) > 1:
                    reexported[path[-1]] = path[0]
        edges = {c: set() for c in children}
        for rel, text in files.items():
            fm = module_of(rel)
            if fm[: len(mod)] != mod or len(fm) == len(mod):
                continue
            child = fm[len(mod)]
            for path in references(text, fm):
                if path[: len(mod)] != mod or len(path) <= len(mod):
                    continue
                name = path[len(mod)]
                target = name if name in edges else reexported.get(name)
                if target in edges and target != child:
                    edges[child].add(target)
        cycles = sccs(edges)
        shown = {k: sorted(v) for k, v in edges.items() if v}
        print(f"{'::'.join(mod)}: {shown}")
        for c in cycles:
            failed = True
            print(f"  CYCLE: {' <-> '.join(sorted(c))}")
    return 1 if failed else 0


def sccs(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
