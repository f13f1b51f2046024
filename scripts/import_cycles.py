#!/usr/bin/env python3
"""Finds import circles between the source files of each crate in the workspace, and exits 1 if there is one.

A file depends on another when it names an item of the other's module by path (`use crate::a::B`,
`super::b::C`, `a::B` for a child module `a`); declaring a module (`mod a;`) is not a dependency, so a
`tests.rs` that uses `super::*` does not make a circle with its parent. Files in a circle cannot be
understood, tested or moved one at a time, which is what the workspace's one-job-per-module rule asks.

Written here because the Rust tools at hand (cargo-modules, cargo-depgraph) draw crate or module trees but
do not report file-level circles, and a dozen lines of path resolution are enough for this code base.
Usage: python3 scripts/import_cycles.py [crate dirs...]   (default: every crates/*)
"""
import os
import re
import sys

WORD = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'b?r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'b?"(?:\\.|[^"\\])*"', '""', text)
    return re.sub(r"b?'(?:\\[^']+|[^'\\])'", "' '", text)


def module_files(src):
    """Maps module paths (tuples) to files, following `mod` declarations from lib.rs / main.rs."""
    modules = {}

    def visit(path, file, dir_for_children):
        modules[path] = file
        text = strip_comments_and_strings(open(file, encoding="utf-8").read())
        for m in re.finditer(r"(#\[path\s*=\s*\"([^\"]+)\"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + WORD + r")\s*;", text):
            name = m.group(3)
            candidates = [os.path.join(dir_for_children, name + ".rs"), os.path.join(dir_for_children, name, "mod.rs")]
            child = next((c for c in candidates if os.path.exists(c)), None)
            if child is None:
                continue
            child_dir = os.path.join(dir_for_children, name)
            visit(path + (name,), child, child_dir)

    for root in ("lib.rs", "main.rs"):
        f = os.path.join(src, root)
        if os.path.exists(f):
            visit((), f, src)
    return modules


def expand_use(tree):
    """Expands `a::{b, c::{d, e}}` into ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+" + WORD, "", tree))
    m = re.search(r"\{", tree)
    if not m:
        return [tree] if tree else []
    prefix = tree[: m.start()]
    depth, end = 0, None
    for i in range(m.start(), len(tree)):
        depth += {"{": 1, "}": -1}.get(tree[i], 0)
        if depth == 0:
            end = i
            break
    inner = tree[m.start() + 1 : end]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p == "":
            continue  # the empty item after a trailing comma names nothing
        if p == "self":
            out.append(prefix.rstrip(":"))
        else:
            out.extend(prefix + q for q in expand_use(p))
    return out


def references(text):
    """Every path a file names: expanded `use` trees and `x::y` paths in code."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        paths.extend(expand_use(m.group(1)))
    code = re.sub(r"\buse\s+[^;]+;", "", text)
    paths.extend(m.group(0) for m in re.finditer(WORD + r"(?:::" + WORD + r")+", code))
    return paths


def resolve(path, here, modules, aliases):
    """The module (tuple) a path names, or None when it is outside the crate. A name a module re-exports
    (`pub use a::B;`) resolves to the module that defines it, as a reader would follow it."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] == "super":
        base = here
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
    elif segs[0] == "self":
        base, segs = here, segs[1:]
    elif here + (segs[0],) in modules:
        base = here
    else:
        return None
    target = base
    for _ in range(32):
        if not segs:
            return target
        s = segs[0]
        if target + (s,) in modules:
            target, segs = target + (s,), segs[1:]
        elif (target, s) in aliases and aliases[(target, s)] != target:
            target, segs = aliases[(target, s)], segs[1:]
        else:
            return target
    return target


def re_exports(modules, texts):
    """(module, name) -> the module a `pub use` there takes the name from."""
    aliases = {}
    for _ in range(4):  # re-exports of re-exports
        for mod in modules:
            for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", texts[mod]):
                for p in expand_use(m.group(1)):
                    name = p.split("::")[-1]
                    target = resolve("::".join(p.split("::")[:-1]) or "self", mod, modules, aliases)
                    if target is not None and name not in ("*",):
                        aliases[(mod, name)] = target
    return aliases


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            strong(v)
    return out


def split_inline_modules(text, here):
    """Splits `mod name { ... }` blocks out of a file's text: [(module path, its own text)], so that
    `super::` inside an inline `mod tests` means the file's module, as it does to the compiler."""
    parts, rest = [], ""
    pos = 0
    for m in re.finditer(r"\bmod\s+(" + WORD + r")\s*\{", text):
        if m.start() < pos:
            continue
        depth, end = 0, len(text)
        for i in range(m.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                end = i
                break
        rest += text[pos : m.start()]
        parts.extend(split_inline_modules(text[m.end() : end], here + (m.group(1),)))
        pos = end + 1
    rest += text[pos:]
    return [(here, rest)] + parts


def crate_cycles(crate_dir):
    src = os.path.join(crate_dir, "src")
    modules = module_files(src)
    texts = {m: strip_comments_and_strings(open(f, encoding="utf-8").read()) for m, f in modules.items()}
    aliases = re_exports(modules, texts)
    graph = {}
    for mod in modules:
        deps = set()
        for scope, text in split_inline_modules(texts[mod], mod):
            for p in references(text):
                target = resolve(p, scope, modules, aliases)
                if target is not None and target != mod and target[: len(mod) + 1] != scope[: len(mod) + 1]:
                    deps.add(target)
        graph[mod] = deps
    return [[os.path.relpath(modules[m]) for m in comp] for comp in cycles(graph)]


def main():
    crates = sys.argv[1:] or sorted(
        os.path.join("crates", c) for c in os.listdir("crates") if os.path.isdir(os.path.join("crates", c, "src"))
    )
    found = 0
    for c in crates:
        for comp in crate_cycles(c):
            found += 1
            print(f"import circle in {c}: " + " <-> ".join(comp))
    if found:
        print(f"{found} import circle(s) between files", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
