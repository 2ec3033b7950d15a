#!/usr/bin/env python3
"""`meson install` into a temporary DESTDIR, then check what a user gets:
the programs, the man pages, the public headers, libhpdlf with versioned
symbols only, and hpdlf.pc; finally build a program outside the tree with
`cc prog.c $(pkg-config --cflags --libs hpdlf)` against the installed copy
and run it.

    check_install.py MESON BUILD_DIR CC
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def sh(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


PROG = r"""
#include <stdio.h>
#include <inttypes.h>
#include <hpdlf/error.h>
#include <hpdlf/tensor.h>
#include <hpdlf/graph.h>
#include <hpdlf/store.h>
#include <hpdlf/exec.h>
#include <hpdlf/kernels.h>

int main(int argc, char **argv)
{
	uint64_t v;
	char buf[32];

	if (argc != 2 || hp_parse_size(argv[1], &v) < 0) {
		fprintf(stderr, "%s\n", hp_errmsg());
		return 1;
	}
	printf("%" PRIu64 " %s|%s\n", v, hp_format_size(v, buf, sizeof buf), hp_strerror(HP_EFORMAT));
	return 0;
}
"""


def options(meson, build):
    r = sh([meson, "introspect", build, "--buildoptions"])
    opts = {o["name"]: o["value"] for o in json.loads(r.stdout)}
    pre = opts["prefix"]
    return {k: os.path.join(pre, opts[k]) for k in ("bindir", "libdir", "includedir", "mandir")}


def exported(lib):
    """(name, version) of every defined dynamic symbol."""
    out = sh(["readelf", "--dyn-syms", "-W", lib]).stdout
    syms = []
    for line in out.split("\n"):
        f = line.split()
        if len(f) >= 8 and f[6] != "UND" and f[4] in ("GLOBAL", "WEAK") and f[3] in ("FUNC", "OBJECT"):
            name, _, ver = f[7].partition("@")
            syms.append((name, ver.lstrip("@")))
    return syms


def main():
    meson, build, cc = sys.argv[1:4]
    d = options(meson, build)
    with tempfile.TemporaryDirectory() as dest:
        r = sh([meson, "install", "-C", build, "--no-rebuild", "--destdir", dest, "--quiet"])
        check(r.returncode == 0, f"meson install: {r.stderr[-2000:]}")
        root = lambda p: dest + p
        version = json.loads(sh([meson, "introspect", build, "--projectinfo"]).stdout)["version"]
        built = [p for p in ("hpdlf-exec", "hpdlf-store", "hpdlf-store-inspect")
                 if os.path.exists(os.path.join(build, "tools", p))]
        check("hpdlf-exec" in built and "hpdlf-store-inspect" in built, f"programs built: {built}")
        for prog in built:
            exe = root(os.path.join(d["bindir"], prog))
            check(os.access(exe, os.X_OK), f"{prog} installed")
            check(os.path.exists(root(os.path.join(d["mandir"], "man1", prog + ".1"))), f"{prog}.1 installed")
            r = sh([exe, "--help"])
            check(r.returncode == 0 and r.stdout.startswith("usage: " + prog), f"installed {prog} --help")
            # --version: meson's project version and the source revision (git describe)
            r = sh([exe, "--version"])
            m = re.fullmatch(re.escape(prog) + r" (\S+) \((\S+)\)\n", r.stdout)
            check(r.returncode == 0 and m is not None and m.group(1) == version and m.group(2),
                  f"installed {prog} --version says {prog} {version} (REVISION): {r.stdout!r}")
        src_headers = sorted(os.path.basename(p) for p in glob.glob(os.path.join(
            os.path.dirname(__file__), "..", "..", "include", "hpdlf", "*.h")))
        inst_headers = sorted(os.listdir(root(os.path.join(d["includedir"], "hpdlf"))))
        check(src_headers and inst_headers == src_headers, f"headers {inst_headers} vs {src_headers}")
        libdir = root(d["libdir"])
        lib = os.path.join(libdir, "libhpdlf.so")
        check(os.path.exists(lib) and os.path.exists(os.path.join(libdir, "pkgconfig", "hpdlf.pc")),
              "libhpdlf.so and hpdlf.pc installed")
        syms = exported(lib)
        check(len(syms) > 10, f"libhpdlf exports {len(syms)} symbols")
        bad = [s for s in syms if s[1] != "HPDLF_0.1" and s[0] != "HPDLF_0.1"]
        check(not bad, f"symbols without version HPDLF_0.1: {bad[:10]}")
        leaked = [s for s in syms if not re.match(r"(hp_|hs_|HPDLF_)", s[0])]
        check(not leaked, f"symbols outside the hp_/hs_ namespaces: {leaked[:10]}")

        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"), PKG_CONFIG_SYSROOT_DIR=dest)
        flags = sh(["pkg-config", "--cflags", "--libs", "hpdlf"], env=env)
        check(flags.returncode == 0, f"pkg-config hpdlf: {flags.stderr}")
        check(dest in flags.stdout, f"pkg-config points into the install: {flags.stdout!r}")
        with tempfile.TemporaryDirectory() as work:
            with open(os.path.join(work, "prog.c"), "w") as f:
                f.write(PROG)
            exe = os.path.join(work, "prog")
            r = sh([cc, "-std=c11", "-Wall", "-Werror", "prog.c", "-o", exe] + flags.stdout.split(), cwd=work)
            check(r.returncode == 0, f"out-of-tree build: {r.stderr}")
            if r.returncode == 0:
                ver = sh(["readelf", "-V", "-W", exe]).stdout
                check("HPDLF_0.1" in ver, "the program binds versioned symbols")
                r = sh([exe, "1.5G"], env=dict(os.environ, LD_LIBRARY_PATH=libdir))
                want = f"{3 << 29} 1.5 GiB|"
                check(r.returncode == 0 and r.stdout.startswith(want), f"out-of-tree run: {r.stdout!r} {r.stderr!r}")
                r = sh(["ldd", exe], env=dict(os.environ, LD_LIBRARY_PATH=libdir))
                check(libdir in r.stdout, f"uses the installed library: {r.stdout}")
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("install checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
