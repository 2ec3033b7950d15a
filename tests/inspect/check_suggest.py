#!/usr/bin/env python3
"""A mistyped option gets one line naming the nearest known one, then where
help is, and exit status 2 (issue 20, item 7), in hpdlf-store-inspect and
hpdlf-store (its daemon options, its commands and their options).

usage: check_suggest.py HPDLF_STORE_INSPECT [HPDLF_STORE]
"""
import subprocess
import sys

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += 0 if ok else 1


def expect(args, first_line):
    r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    lines = r.stderr.splitlines()
    check(r.returncode == 2 and lines[:1] == [first_line] and len(lines) == 2 and "--help" in lines[1],
          f"{' '.join(args[1:])}: exit {r.returncode}, {r.stderr!r}")


def main():
    inspect = sys.argv[1]
    expect([inspect, "--jsn"], "hpdlf-store-inspect: unknown option '--jsn' (did you mean --json?)")
    expect([inspect, "--promethues"], "hpdlf-store-inspect: unknown option '--promethues' (did you mean --prometheus?)")
    expect([inspect, "--tensrs=1"], "hpdlf-store-inspect: unknown option '--tensrs' (did you mean --tensors?)")
    expect([inspect, "--frobnicate"], "hpdlf-store-inspect: unknown option '--frobnicate'")
    expect([inspect, "--plot"], "hpdlf-store-inspect: missing the argument of option '--plot'")
    if len(sys.argv) > 2:
        store = sys.argv[2]
        expect([store, "--dran", "1G"], "hpdlf-store: unknown option '--dran' (did you mean --dram?)")
        expect([store, "--lisen", "x:1"], "hpdlf-store: unknown option '--lisen' (did you mean --listen?)")
        expect([store, "ls", "--hostfiel", "h"], "hpdlf-store: unknown option '--hostfiel' (did you mean --hostfile?)")
        expect([store, "--dram"], "hpdlf-store: missing the argument of option '--dram'")
        expect([store, "lss"], "hpdlf-store: unknown command 'lss' (did you mean ls?)")
        expect([store, "shutdwn"], "hpdlf-store: unknown command 'shutdwn' (did you mean shutdown?)")
        expect([store, "frobnicate"], "hpdlf-store: unknown command 'frobnicate'")
        # every missing daemon option in one line (no token in the environment)
        import os
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HPDLF_", "SLURM"))}
        r = subprocess.run([store], capture_output=True, text=True, timeout=30, env=env)
        first = r.stderr.splitlines()[:1]
        check(r.returncode == 2 and first and all(o in first[0] for o in ("--listen", "--dram", "--token-file")),
              f"hpdlf-store without options names all three missing ones in one line: {r.stderr!r}")
        r = subprocess.run([store, "--dram", "1G", "--listen", "127.0.0.1:1"], capture_output=True, text=True,
                           timeout=30, env=env)
        check(r.returncode == 2 and r.stderr.startswith("hpdlf-store: missing --token-file F") and
              "--dram" not in r.stderr.splitlines()[0], f"only the token missing: {r.stderr!r}")
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
