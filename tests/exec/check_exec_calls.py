#!/usr/bin/env python3
"""No file in exec/ calls back into a file that calls it.

Reads the objects of exec/ with `nm` (defined and undefined symbols), draws
the file-level call graph (file A -> file B when A uses a symbol B defines)
and fails on any cycle, printing each one.  Usage:
    check_exec_calls.py LIB.a    (the library holding the exec_*.c.o objects)
"""
import os
import re
import subprocess
import sys

LINE = re.compile(r'^(.*?\.a):(.*?):\s*(.*)$')


def add(files, member, fields):
    name = os.path.basename(member)
    if not (name.startswith('exec_') and name.endswith('.c.o')):
        return
    defined, used = files.setdefault(name[len('exec_'):-len('.o')], (set(), set()))
    if len(fields) == 2 and fields[0] == 'U':
        used.add(fields[1])
    elif len(fields) == 3 and fields[1] in 'TDBRVWCG':
        defined.add(fields[2])


def graph(lib):
    out = subprocess.run(['nm', '-g', '-A', lib], check=True, capture_output=True, text=True).stdout
    files = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            add(files, m.group(2), m.group(3).split())
    owner = {}
    for f, (defined, _) in files.items():
        for s in defined:
            owner[s] = f
    edges = {f: set() for f in files}
    for f, (_, used) in files.items():
        for s in used:
            if s in owner and owner[s] != f:
                edges[f].add(owner[s])
    return edges


def cycles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    edges = graph(sys.argv[1])
    if len(edges) < 5:
        print('check_exec_calls: found only %d exec objects in %s' % (len(edges), sys.argv[1]), file=sys.stderr)
        return 1
    bad = cycles(edges)
    for comp in bad:
        print('cycle among: ' + ' '.join(comp))
        for f in comp:
            print('  %s -> %s' % (f, ' '.join(sorted(e for e in edges[f] if e in comp))))
    if bad:
        return 1
    print('exec/: %d files, %d calls between files, no cycle' % (len(edges), sum(len(e) for e in edges.values())))
    return 0


if __name__ == '__main__':
    sys.exit(main())
