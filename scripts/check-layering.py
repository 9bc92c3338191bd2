#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The layering rules `make check` enforces (meson test 'layering'):

1. The agent's pure core (agent/core/: placement policy, stable index,
   unstable table, their hash table, slot allocator) includes only the C
   library, GLib, libnuksm and itself: no I/O, no agent state.  meson.build
   links it, and its unit tests, with GLib and libnuksm only.
2. Nothing of the agent, nuksmctl or libnuksm includes a QEMU header:
   the protocol header is the whole contract between the two sides.
3. No modules of the agent call each other in a circle, of two modules
   or of more, nor any of the QEMU object (hw/mem/nuksm/, a graph of its
   own): a module (a .c file and its .h) calls what another's header
   declares only if that one calls, directly or through others, nothing
   of its own, so that the agent reads from the top (main,
   lifecycle, server) down to the core, and the QEMU object from the top
   (the QOM object, QMP) through the pipeline (scan, the agent's
   connection, commit) down to its helpers.  Callbacks that a lower
   module is handed (a function pointer) are not calls.  For the rule to
   see every call, a module's functions are declared in its own header:
   a .c file that defines what another module's header declares breaks
   it too.

    check-layering.py SOURCE_ROOT
    check-layering.py --graph SOURCE_ROOT

Prints every include or call that breaks a rule and exits 1, else exits
0.  With --graph, prints which module calls which instead, the agent's
graph and then the QEMU object's.
"""

import re
import sys
from pathlib import Path

CORE = "agent/core"
LIBNUKSM_HEADERS = {"nuksm-proto.h", "nuksm-digest.h", "nuksm-pagemap.h",
                    "nuksm-config.h"}
C_HEADERS = {"assert.h", "errno.h", "inttypes.h", "limits.h", "math.h",
             "stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h",
             "string.h"}
# Top directories of QEMU's include/ (and its generated trace and QAPI
# headers) that an agent file could reach for.
QEMU_DIRS = {"qemu", "hw", "exec", "qapi", "system", "sysemu", "migration",
             "block", "qom", "monitor", "chardev", "crypto", "io", "net",
             "ui", "accel", "tcg", "trace", "standard-headers", "fpu"}
OUTSIDE_QEMU = ["agent", "ctl", "libnuksm"]
# Where no two modules may call each other both ways: each its own graph.
LAYERED = ["agent", "hw/mem/nuksm"]

# A function a header declares or defines inline: "type name(" at the
# start of a line, not a typedef or a macro.
DECLARED = re.compile(r"^(?!typedef\b)[A-Za-z_][\w \t*]*?[ \t*]"
                      r"([a-z_][a-z0-9_]*)\(", re.M)
CALL = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(")
COMMENT_OR_STRING = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\])*"',
                               re.S)

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def includes(path):
    return INCLUDE.findall(path.read_text())


def core_violations(root):
    core_files = sorted((root / CORE).glob("*.[ch]"))
    core_headers = {path.name for path in core_files if path.suffix == ".h"}
    if not core_files:
        yield f"{CORE}/: no sources: the pure core is not where it belongs"
    for path in core_files:
        for kind, name in includes(path):
            allowed = (name in C_HEADERS or name == "glib.h") \
                if kind == "<" else \
                (name in core_headers or name in LIBNUKSM_HEADERS)
            if not allowed:
                yield (f"{path.relative_to(root)}: includes {name}: "
                       "the pure core may include only the C library, "
                       "GLib, libnuksm and itself")


def qemu_violations(root):
    for top in OUTSIDE_QEMU:
        for path in sorted((root / top).rglob("*.[ch]")):
            for kind, name in includes(path):
                first = name.split("/")[0]
                if ("/" in name and first in QEMU_DIRS) or \
                        name == "qemu/osdep.h" or name == "osdep.h":
                    yield (f"{path.relative_to(root)}: includes {name}: "
                           f"{top}/ must not include QEMU headers")


def module_files(root, top, suffix):
    """The .c or .h files of the modules under @top: agent/ with its
    folders, hw/mem/nuksm/ without libnuksm/ (a link to the shared core)."""
    pattern = "*" + suffix
    files = (root / top).rglob(pattern) if top == "agent" else \
        (root / top).glob(pattern)
    return sorted(files)


def declared(path):
    return DECLARED.findall(COMMENT_OR_STRING.sub("", path.read_text()))


def module_calls(root, top):
    """{module: {modules whose declared functions it calls}}"""
    owner = {}
    for header in module_files(root, top, ".h"):
        for name in declared(header):
            owner.setdefault(name, header.stem)
    calls = {}
    for source in module_files(root, top, ".c"):
        text = COMMENT_OR_STRING.sub("", source.read_text())
        own = set(DECLARED.findall(text))
        calls[source.stem] = {owner[name] for name in CALL.findall(text)
                              if name in owner and name not in own
                              and owner[name] != source.stem}
    return calls


def misplaced_declarations(root, top):
    sources = module_files(root, top, ".c")
    for header in module_files(root, top, ".h"):
        names = set(declared(header))
        for source in sources:
            if source.stem == header.stem:
                continue
            for name in sorted(names.intersection(declared(source))):
                yield (f"{source.relative_to(root)}: defines {name}(), "
                       f"which {header.name} declares: a module's functions "
                       "are declared in its own header")


def circles(calls):
    """The strongly connected components of @calls of two modules or
    more (Tarjan's algorithm, iterative): each a circle of calls."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(calls):
        if start in index:
            continue
        work = [(start, iter(sorted(calls.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, callees = work[-1]
            callee = next(callees, None)
            if callee is None:
                work.pop()
                if work:
                    caller = work[-1][0]
                    low[caller] = min(low[caller], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif callee not in index:
                index[callee] = low[callee] = len(index)
                stack.append(callee)
                on_stack.add(callee)
                work.append((callee, iter(sorted(calls.get(callee, ())))))
            elif callee in on_stack:
                low[node] = min(low[node], index[callee])
    return sorted(found)


def circle_violations(root, top):
    calls = module_calls(root, top)
    for circle in circles(calls):
        edges = ", ".join(f"{a} -> {b}" for a in circle
                          for b in sorted(calls[a]) if b in circle)
        yield (f"{top}: {', '.join(circle)} call each other in a circle "
               f"({edges}): one of them must stop calling up (move the "
               "shared part down, or hand it a callback)")


def main():
    args = sys.argv[1:]
    graph = args[:1] == ["--graph"]
    if graph:
        args = args[1:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(args[0])
    if graph:
        for top in LAYERED:
            calls = module_calls(root, top)
            width = max(map(len, calls), default=0)
            print(f"{top}/:")
            for module, callees in sorted(calls.items()):
                print(f"  {module:{width}} -> {' '.join(sorted(callees))}")
        return 0
    problems = [*core_violations(root), *qemu_violations(root)]
    for top in LAYERED:
        problems += [*misplaced_declarations(root, top),
                     *circle_violations(root, top)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
