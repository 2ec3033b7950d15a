#!/usr/bin/env python3
"""The folder dependency order of the library, checked on what was built.

    common <- graph <- {onnx, kernels, store} <- exec <- tools

A folder may use itself and the folders its row of LAYERS names, nothing
else: no folder uses one above it, and onnx, kernels and store never use
each other.  Two views, because either alone misses things:

- symbols: every object of libhpdlf_internal.a (`nm -P`); each undefined
  symbol that some other object of the archive defines must be defined in
  an allowed folder (all symbols, not only hp_/hs_: the ONNX wire walker's
  pb_* or the importer's imp_* count as much);
- includes: every `#include "..."` of the folders' .c/.h files and of the
  public headers (a struct or macro used across a layer leaves no symbol).

Before the real check the checker is run on planted violations (a graph
object calling a kernel, onnx including a kernels header...), so a checker
that stopped seeing anything fails instead of passing.

usage: check_layers.py ARCHIVE SOURCE_ROOT [NM]
"""
import os
import re
import subprocess
import sys

LAYERS = {
    'common': set(),
    'graph': {'common'},
    'onnx': {'common', 'graph'},
    'kernels': {'common', 'graph'},
    'store': {'common', 'graph'},
    'exec': {'common', 'graph', 'onnx', 'kernels', 'store'},
    'tools': {'common', 'graph', 'onnx', 'kernels', 'store', 'exec'},
}
# Folders whose sources make up the archive (tools/ are programs).
LIBRARY = ['common', 'graph', 'onnx', 'kernels', 'store', 'exec']
# Public headers that do not carry their folder's name.
PUBLIC_OWNER = {'error.h': 'common', 'tensor.h': 'common', 'train.h': 'exec'}

DEFINED = set('TDBRCVWGSiu')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def member_folder(member):
    """Folder of an archive member: meson names an object after its source
    path with '/' turned into '_' (generated sources: meson-generated_.._)."""
    base = os.path.basename(member)
    base = re.sub(r'^meson-generated_(\.\._)*', '', base)
    folder = base.split('_', 1)[0]
    return folder if folder in LAYERS else None


def read_nm(nm, archive):
    out = subprocess.run([nm, '-A', '-P', archive], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r'^[^\[]*\[([^\]]+)\]: (\S+) (\S)', line)
        if m:
            rows.append((m.group(1), m.group(2), m.group(3)))
    return rows


def symbol_errors(rows):
    """rows: (member, symbol, nm type).  Returns (errors, uses by folder pair)."""
    errors, where, undef = [], {}, []
    for member, sym, typ in rows:
        folder = member_folder(member)
        if folder is None:
            errors.append('%s: object of no known folder (add its folder to LAYERS)' % member)
            continue
        if typ == 'U':
            undef.append((member, folder, sym))
        elif typ in DEFINED:
            where.setdefault(sym, set()).add(folder)
    uses = {}
    for member, folder, sym in undef:
        for owner in sorted(where.get(sym, ())):
            if owner == folder:
                continue
            uses[(folder, owner)] = uses.get((folder, owner), 0) + 1
            if owner not in LAYERS[folder]:
                errors.append('%s (%s/) uses %s, defined in %s/' % (os.path.basename(member), folder, sym, owner))
    return errors, uses


def include_owner(path, including):
    """Folder that owns an included file, or None if unknown."""
    if path.startswith('hpdlf/'):
        name = path[len('hpdlf/'):]
        if name in PUBLIC_OWNER:
            return PUBLIC_OWNER[name]
        stem = name[:-2] if name.endswith('.h') else name
        return stem if stem in LAYERS else None
    top = path.split('/', 1)[0]
    if '/' in path and top in LAYERS:
        return top
    # relative to the including file (store/remote: "client.h")
    return including.split('/', 1)[0] if including.split('/', 1)[0] in LAYERS else None


def include_errors(files):
    """files: (relative path, folder, text).  Returns (errors, count)."""
    errors, count = [], 0
    for rel, folder, text in files:
        for inc in INCLUDE.findall(text):
            count += 1
            owner = include_owner(inc, rel)
            if owner is None:
                errors.append('%s: #include "%s" belongs to no known folder (add it to PUBLIC_OWNER)' % (rel, inc))
            elif owner != folder and owner not in LAYERS[folder]:
                errors.append('%s (%s/) includes "%s" of %s/' % (rel, folder, inc, owner))
    return errors, count


def source_files(root):
    files = []
    for folder in LIBRARY + ['tools']:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if name.endswith(('.c', '.h')):
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, root)
                    with open(path, encoding='utf-8') as f:
                        files.append((rel, folder, f.read()))
    incdir = os.path.join(root, 'include', 'hpdlf')
    for name in sorted(os.listdir(incdir)):
        if name.endswith('.h'):
            owner = include_owner('hpdlf/' + name, '')
            with open(os.path.join(incdir, name), encoding='utf-8') as f:
                text = f.read()
            if owner is None:
                files.append(('include/hpdlf/' + name, 'common', '#include "hpdlf/%s"\n' % name))
            else:
                files.append(('include/hpdlf/' + name, owner, text))
    return files


def self_test(rows):
    """Plant one violation of each kind into real data: each must be found."""
    m, defined = {}, {}
    for member, sym, typ in rows:
        folder = member_folder(member)
        m.setdefault(folder, member)
        if typ == 'T':
            defined.setdefault(folder, set()).add(sym)
    # one function of the folder used, whatever its name is today
    pick = {f: min(defined[f]) for f in LIBRARY}
    planted_syms = [(m['graph'], pick['kernels'], 'U'),     # graph -> kernels (above)
                    (m['onnx'], pick['kernels'], 'U'),      # onnx -> kernels (sibling)
                    (m['kernels'], pick['onnx'], 'U'),      # kernels -> onnx (sibling)
                    (m['kernels'], pick['store'], 'U'),     # kernels -> store (sibling)
                    (m['store'], pick['exec'], 'U'),        # store -> exec (above)
                    (m['common'], pick['graph'], 'U')]      # common -> graph (above)
    base = set(symbol_errors(rows)[0])
    errors = [e for e in symbol_errors(rows + planted_syms)[0] if e not in base]
    want = [(member_folder(mm), sym) for mm, sym, _ in planted_syms]
    for folder, sym in want:
        if not any(('(%s/) uses %s,' % (folder, sym)) in e for e in errors):
            return 'self-test: planted use of %s from %s/ was not reported' % (sym, folder)
    if len(errors) != len(want):
        return 'self-test: %d errors for %d planted violations: %s' % (len(errors), len(want), errors)
    planted_inc = [('graph/x.c', 'graph', '#include "hpdlf/kernels.h"\n'),
                   ('kernels/x.c', 'kernels', '#include "onnx/wire.h"\n'),
                   ('onnx/x.c', 'onnx', '#include "exec/plan.h"\n'),
                   ('common/x.c', 'common', '#include "hpdlf/train.h"\n'),
                   ('store/x.c', 'store', '#include "hpdlf/nosuch.h"\n')]
    errors, _ = include_errors(planted_inc)
    if len(errors) != len(planted_inc):
        return 'self-test: planted includes gave %s' % errors
    fine = [('exec/x.c', 'exec', '#include "onnx/export.h"\n#include "hpdlf/store.h"\n'),
            ('store/remote/x.c', 'store', '#include "client.h"\n#include "hpdlf/graph.h"\n')]
    errors, _ = include_errors(fine)
    if errors:
        return 'self-test: allowed includes reported: %s' % errors
    return None


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    archive, root = sys.argv[1], sys.argv[2]
    nm = sys.argv[3] if len(sys.argv) > 3 else 'nm'
    rows = read_nm(nm, archive)
    seen = {member_folder(member) for member, _, _ in rows}
    missing = [f for f in LIBRARY if f not in seen]
    if missing:
        print('no objects of %s in %s: is the archive complete?' % (', '.join(missing), archive))
        return 1
    bad = self_test(rows)
    if bad:
        print(bad)
        return 1
    errors, uses = symbol_errors(rows)
    inc_errors, nincs = include_errors(source_files(root))
    errors += inc_errors
    for (a, b), n in sorted(uses.items()):
        print('%-8s -> %-8s %4d symbol uses' % (a, b, n))
    print('%d objects, %d #include lines checked' % (len({r[0] for r in rows}), nincs))
    for e in errors:
        print('VIOLATION', e)
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
