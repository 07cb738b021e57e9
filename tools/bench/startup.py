#!/usr/bin/env python3
"""startup.py LIB ROUNDS CMD...: run CMD bare and with LIB preloaded,
alternating, ROUNDS times each; print the median wall time of each and
the ratio bare/shim (1.0: no cost) as one JSON line."""
import json
import os
import subprocess
import sys
import time


def once(cmd, env):
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    lib, rounds, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    bare = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    shim = dict(bare, LD_PRELOAD=lib)
    once(cmd, bare)   # warm the page cache
    b, s = [], []
    for _ in range(rounds):
        b.append(once(cmd, bare))
        s.append(once(cmd, shim))
    b.sort()
    s.sort()
    mb, ms = b[len(b) // 2], s[len(s) // 2]
    print(json.dumps({"bare_ms": round(mb * 1000, 2), "shim_ms": round(ms * 1000, 2), "ratio": round(mb / ms, 3)}))


if __name__ == "__main__":
    main()
