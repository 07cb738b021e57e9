#!/usr/bin/env python3
"""pyfirst.py LIB PORT ROUNDS [POLICY]: a python process's first connect
(its socket made before the clock starts), bare and with LIB preloaded
(NETSHIM_POLICY=POLICY when given), ROUNDS processes each, alternating.
Prints the differences' p10/p50/p90 (us) and the median page faults of
the connect in each, as one JSON line."""
import json
import os
import subprocess
import sys

CHILD = r"""
import resource, socket, sys, time
s = socket.socket()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t0 = time.perf_counter()
s.connect(("127.0.0.1", int(sys.argv[1])))
t1 = time.perf_counter()
f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
s.close()
print((t1 - t0) * 1e6, f1 - f0)
"""


def once(port, env):
    out = subprocess.run([sys.executable, "-c", CHILD, str(port)], env=env, capture_output=True, text=True).stdout
    us, faults = out.split()
    return float(us), int(faults)


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    lib, port, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    bare = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "NETSHIM_POLICY")}
    shim = dict(bare, LD_PRELOAD=lib)
    if len(sys.argv) > 4:
        shim["NETSHIM_POLICY"] = sys.argv[4]
    once(port, bare)   # warm the page cache
    b, s = [], []
    for _ in range(rounds):
        b.append(once(port, bare))
        s.append(once(port, shim))
    d = [y[0] - x[0] for x, y in zip(b, s)]
    print(json.dumps({"bare_us": round(q([x[0] for x in b], .5)), "p10": round(q(d, .1)), "p50": round(q(d, .5)),
                      "p90": round(q(d, .9)), "bare_faults": q([x[1] for x in b], .5),
                      "shim_faults": q([x[1] for x in s], .5)}))


if __name__ == "__main__":
    main()
