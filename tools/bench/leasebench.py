#!/usr/bin/env python3
"""The fleet's leases at scale (issue 51): the agent's script
(tools/agent/lease.c, read from its source) against a redis-server on
loopback, with N machines' entries (default 10,000) on each of D
destinations (default 100).

Prints, for one destination: a call that counts the max-min level again
(over the machines' demands as counted, at most once a poll), a call that
does not (the other N-1 calls of a poll), a call that makes the counts
again from every machine's entry (every 5 minutes, and once a poll
for an agent back from a loss), and an agent's whole batch
of D destinations the first two ways; median of 21 calls each, timed by
the client around EVALSHA on loopback (a round trip here is ~20-50 us).
The Redis time a poll costs for a destination is about one recount plus N
calls as counted.

  tools/bench/leasebench.py [--machines N] [--dests D]"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def script_text():
    src = open(os.path.join(ROOT, "tools/agent/lease.c")).read()
    body = src[src.index("static const char SCRIPT[] ="):]
    body = body[:body.index(";\n")]
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', body)
    return "".join(parts).encode().decode("unicode_escape")


class Resp:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b":"):
            return int(rest) if t == b":" else rest.decode()
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"bad reply {line!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--machines", type=int, default=10000)
    ap.add_argument("--dests", type=int, default=100)
    args = ap.parse_args()
    sc = script_text()
    with tempfile.TemporaryDirectory() as d:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    r = Resp(port)
                    r.cmd("PING")
                    break
                except OSError:
                    time.sleep(0.05)
            now_ms = int(r.cmd("TIME")[0]) * 1000
            far = now_ms + 3600 * 1000
            prefix = "netshim:{bench}:"
            for dd in range(args.dests):
                h, z = f"{prefix}lease:0:dest{dd}:443", f"{prefix}leasex:0:dest{dd}:443"
                for base in range(0, args.machines, 1000):
                    kv, zs = [], []
                    for m in range(base, min(base + 1000, args.machines)):
                        kv += [f"m{m}", f"{1 if m % 3 else 0} {m % 7} {far} 40000"]
                        zs += [far, f"m{m}"]
                    r.cmd("HSET", h, *kv)
                    r.cmd("ZADD", z, *zs)
            sha = r.cmd("SCRIPT", "LOAD", sc)

            def call(ndest, recount, full=False):
                keys, argv = [], []
                for dd in range(ndest):
                    keys += [f"{prefix}{p}:0:dest{dd}:443" for p in ("lease", "leasem", "leasex")]
                    argv += [40000, 5, 1]
                for dd in range(ndest):
                    if recount:
                        r.cmd("HDEL", f"{prefix}leasem:0:dest{dd}:443", "at")
                    if full:   # (as made long ago: the mend asked makes them again)
                        r.cmd("HSET", f"{prefix}leasem:0:dest{dd}:443", "full", 0)
                t0 = time.perf_counter()
                # (poll: the level counted again when asked, else not within the run)
                r.cmd("EVALSHA", sha, len(keys), *keys, "bench-node", 3600 * 1000, 500 if recount else 3600 * 1000,
                      1 if full else 0, *argv)
                return (time.perf_counter() - t0) * 1000

            call(args.dests, True)   # every sum and count made once
            rows = [("one destination, the level counted again", 1, True, False),
                    ("one destination, the level as counted this poll", 1, False, False),
                    ("one destination, the counts made again from every machine's entry (every 5 min, and after a loss)", 1, True, True),
                    (f"an agent's batch of {args.dests} destinations, every level counted again", args.dests, True,
                     False),
                    (f"an agent's batch of {args.dests} destinations, as counted this poll", args.dests, False,
                     False)]
            print(f"fleet leases, {args.machines} machines on each of {args.dests} destinations "
                  f"(redis-server on loopback, median of 21 EVALSHA):")
            for name, nd, rc, full in rows:
                ts = [call(nd, rc, full) for _ in range(21)]
                print(f"  {name}: {statistics.median(ts):.2f} ms (max {max(ts):.2f})")
            info = r.cmd("INFO", "memory")
            used = re.search(r"used_memory_human:(\S+)", info)
            print(f"  redis memory with these entries: {used.group(1) if used else '?'}")
        finally:
            srv.kill()
            srv.wait()


if __name__ == "__main__":
    sys.exit(main())
