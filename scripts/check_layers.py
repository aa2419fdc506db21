#!/usr/bin/env python3
"""Checks the layering of src/ (CONTRIBUTING.md, "Layers").

Include rules, from the sources:
  - a file includes headers of its own folder, of folders below it in
    LAYERS, and include/wna16.h; never of a folder above it;
  - a folder in PUBLIC_ONLY includes only wna16.h and the headers of other
    PUBLIC_ONLY folders (plus PUBLIC_ONLY_MAY_INCLUDE);
  - no cycle of #includes between folders.
Call rules, from the symbols of the built object files (nm: a symbol one
object leaves undefined and another defines is a call, or a use, of the
second file by the first):
  - no call cycle between files, nor between folders;
  - no call from a folder into a folder above it.

usage: scripts/check_layers.py [--root DIR] [--build DIR] [--no-calls]
Exit status 0 when clean, 1 naming every violation, 2 on bad usage.
System python3 only (and nm, or $NM, for the call rules).
"""
import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict, deque

# The layers of src/, lowest first; folders in one tuple share a rank and
# may include each other (a cycle between them is still refused). A folder
# of src/ that is not listed is an error: add it here, in its place.
LAYERS = [
    ("core",),         # status, diag, allocation, bf16/fp16, pool, clock, fs, utf8, json_get
    ("jinja",),        # the Jinja subset interpreter: core only
    ("tokenizer",),    # BPE, detokenization, chat (calls jinja)
    ("parallel",),     # shard plan (pure), communicator (parallel/mpi: the plug-in)
    ("io",),           # safetensors reader and writer
    ("format",),       # config.json, quant configs, modules, qweight, inspect (shard plan)
    ("kernels",),      # dispatch, GEMM, dense, attention; ISA leaves
    ("moe",),          # the fused MoE layer
    ("model",),        # immutable weights and the forward's blocks
    ("runtime",),      # per-request execution: KV memory, workspace, forward, executor
    ("generate",),     # sampling, logprobs, the output processor, scoring, generate
    ("grammar",),      # constrained decoding: grammars, token masks
    ("quant",),        # RTN and GPTQ
    ("engine",),       # the serving engine: scheduler, requests, metrics
    ("tool",),         # what the tool's commands and benchmarks share
    ("bench",),        # `wna16 bench`: may include internal headers
    ("cli", "server"),  # front ends
]

# Front ends: the public API only.
PUBLIC_ONLY = {"tool", "cli", "server"}
# Headers outside PUBLIC_ONLY that a public-only folder may include: they
# declare nothing beyond the public API themselves.
PUBLIC_ONLY_MAY_INCLUDE = {"bench/bench.h"}
PUBLIC_HEADER = "wna16.h"

SOURCE_EXT = (".c", ".h", ".inc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def rank_table():
    rank = {}
    for i, tier in enumerate(LAYERS):
        for folder in tier:
            rank[folder] = i
    return rank


def folder_of(path):
    """'kernels/avx2/x.c' -> 'kernels' (paths relative to src/)."""
    return path.split("/", 1)[0] if "/" in path else ""


def source_files(src):
    out = []
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(SOURCE_EXT):
                out.append(os.path.relpath(os.path.join(dirpath, name), src))
    return sorted(out)


def includes_of(src, rel):
    """The project includes of one file, resolved to paths relative to src/
    (None for wna16.h); headers that are not in src/ are left out."""
    with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
        text = f.read()
    found = []
    for name in INCLUDE_RE.findall(text):
        if name == PUBLIC_HEADER:
            found.append((name, None))
            continue
        for cand in (name, os.path.normpath(os.path.join(os.path.dirname(rel), name))):
            if os.path.isfile(os.path.join(src, cand)):
                found.append((name, cand.replace(os.sep, "/")))
                break
    return found


def sccs(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(edges.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def one_cycle(comp, edges):
    """A shortest cycle through the component's first node."""
    members, start = set(comp), comp[0]
    prev, queue = {start: None}, deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(edges.get(v, ())):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp + [comp[0]]


def check_includes(src, rank, problems):
    files = source_files(src)
    folder_edges = defaultdict(set)  # folder -> folders it includes
    why = defaultdict(list)          # (folder, folder) -> ["a.c includes b.h"]
    for rel in files:
        f = folder_of(rel)
        if f and f not in rank:
            problems.append(f"layer table: src/{rel}: folder '{f}' is not in LAYERS "
                            f"(scripts/check_layers.py)")
            continue
        for name, target in includes_of(src, rel):
            if target is None:
                continue
            g = folder_of(target)
            if not f or not g or g == f:
                continue
            if g not in rank:
                continue  # reported for the target's own files
            folder_edges[f].add(g)
            why[(f, g)].append(f'src/{rel} includes "{name}"')
            if rank[g] > rank[f]:
                problems.append(f'include of a higher layer: src/{rel} ({f}) includes "{name}": '
                                f"{g} is above {f}")
            if f in PUBLIC_ONLY and g not in PUBLIC_ONLY and target not in PUBLIC_ONLY_MAY_INCLUDE:
                problems.append(f'public API only: src/{rel} ({f}) includes "{name}"; '
                                f"{f} may include only {PUBLIC_HEADER} and the front ends' headers")
    for comp in sccs(set(folder_edges) | {g for s in folder_edges.values() for g in s},
                     folder_edges):
        cycle = one_cycle(comp, folder_edges)
        lines = [f"include cycle between folders: {' -> '.join(cycle)}"]
        for a, b in zip(cycle, cycle[1:]):
            lines += [f"    {w}" for w in why[(a, b)][:3]]
        problems.append("\n".join(lines))


def object_files(build):
    for dirpath, _, names in os.walk(build):
        for name in names:
            if name.endswith(".o"):
                yield os.path.join(dirpath, name)


def source_of_object(obj, root):
    """CMake puts the object of <root>/src/x/y.c at .../<target>.dir/src/x/y.c.o."""
    path = obj.replace(os.sep, "/")
    at = path.rfind(".dir/")
    if at < 0:
        return None
    rel = path[at + len(".dir/"):-len(".o")]
    if not rel.startswith("src/") or not os.path.isfile(os.path.join(root, rel)):
        return None
    return rel[len("src/"):]


def nm_symbols(obj):
    out = subprocess.run([os.environ.get("NM", "nm"), "-P", obj], capture_output=True, text=True,
                         check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper() or kind in ("w", "v"):
            defined.add(name)
    return defined, undefined


def check_calls(root, build, rank, problems):
    objs = {}
    for obj in sorted(object_files(build)):
        src = source_of_object(obj, root)
        if src and src not in objs:
            objs[src] = obj
    if not objs:
        problems.append(f"calls: no object files of src/ under {build}; build first "
                        f"(scripts/build.sh) or pass --no-calls")
        return
    definer, uses = {}, {}
    for src, obj in objs.items():
        defined, undefined = nm_symbols(obj)
        uses[src] = undefined
        for sym in defined:
            definer.setdefault(sym, src)
    file_edges, folder_edges = defaultdict(set), defaultdict(set)
    why = defaultdict(list)
    for src, syms in uses.items():
        for sym in sorted(syms):
            dst = definer.get(sym)
            if not dst or dst == src:
                continue
            file_edges[src].add(dst)
            why[(src, dst)].append(sym)
            f, g = folder_of(src), folder_of(dst)
            if f != g and f in rank and g in rank:
                folder_edges[f].add(g)
                why[(f, g)].append(f"src/{src} uses {sym} (src/{dst})")
    for src in sorted(file_edges):
        for dst in sorted(file_edges[src]):
            f, g = folder_of(src), folder_of(dst)
            if f in rank and g in rank and rank[g] > rank[f]:
                problems.append(f"call into a higher layer: src/{src} ({f}) uses "
                                f"{', '.join(why[(src, dst)][:3])} of src/{dst} ({g})")
    for comp in sccs(set(file_edges) | {d for s in file_edges.values() for d in s}, file_edges):
        cycle = one_cycle(comp, file_edges)
        lines = [f"call cycle between files: {' -> '.join('src/' + c for c in cycle)}"]
        if len(comp) > len(cycle) - 1:
            lines.append(f"    (one of the cycles among {', '.join('src/' + c for c in comp)})")
        members = set(comp)
        for a in comp:
            for b in sorted(file_edges[a] & members):
                lines.append(f"    src/{a} uses {', '.join(why[(a, b)][:3])} (src/{b})")
        problems.append("\n".join(lines))
    for comp in sccs(set(folder_edges) | {g for s in folder_edges.values() for g in s},
                     folder_edges):
        cycle = one_cycle(comp, folder_edges)
        lines = [f"call cycle between folders: {' -> '.join(cycle)}"]
        for a, b in zip(cycle, cycle[1:]):
            lines += [f"    {w}" for w in why[(a, b)][:3]]
        problems.append("\n".join(lines))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here),
                    help="the repository (its src/ is checked); default: this script's")
    ap.add_argument("--build", help="the build tree with the object files (default: ROOT/build)")
    ap.add_argument("--no-calls", action="store_true", help="include rules only (no build needed)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    src = os.path.join(root, "src")
    if not os.path.isdir(src):
        print(f"check_layers: {src} is not a directory", file=sys.stderr)
        return 2
    rank = rank_table()
    problems = []
    check_includes(src, rank, problems)
    if not args.no_calls:
        check_calls(root, os.path.abspath(args.build or os.path.join(root, "build")), rank,
                    problems)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} violation{'s' if len(problems) != 1 else ''}")
        return 1
    print("check_layers: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
