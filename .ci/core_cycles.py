#!/usr/bin/env python3
"""Fails when the core's modules reference each other in a circle.

A module is a file under crates/spillway-core/src (`a/mod.rs` is `a`, `a/b.rs` is `a::b`); it depends on every
module it names through a `crate::` path (imports, types, calls, doc links). A submodule naming its parent (or
the parent its submodule) is not counted: that is nesting, not a circle. Prints the circle it finds."""
import pathlib, re, sys

root = pathlib.Path(__file__).resolve().parent.parent / "crates/spillway-core/src"
mods = {}
for f in sorted(root.rglob("*.rs")):
    rel = f.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts == ["lib"]:
        continue
    mods["::".join(parts)] = f.read_text()

deps = {}
for name, text in mods.items():
    found = set()
    for m in re.finditer(r"crate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", text):
        path = m.group(1).split("::")
        # The longest prefix that is a module.
        for k in range(len(path), 0, -1):
            cand = "::".join(path[:k])
            if cand in mods:
                found.add(cand)
                break
    nested = lambda a, b: a.startswith(b + "::") or b.startswith(a + "::")
    deps[name] = sorted(d for d in found if d != name and not nested(d, name))

# Depth-first search for a back edge.
state, stack = {}, []
def visit(n):
    state[n] = 1
    stack.append(n)
    for d in deps[n]:
        if state.get(d) == 1:
            cycle = stack[stack.index(d):] + [d]
            print("FAIL: spillway-core modules reference each other in a circle: " + " -> ".join(cycle))
            sys.exit(1)
        if d not in state:
            visit(d)
    stack.pop()
    state[n] = 2

for n in sorted(deps):
    if n not in state:
        visit(n)
print(f"ok: {len(deps)} core modules, no circle")
