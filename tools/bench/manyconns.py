#!/usr/bin/env python3
"""manyconns.py N: N concurrent asyncio connections, each sending a request
to a local server (a child process) that accepts and never answers, each
then awaiting its answer. Under the shim with a read deadline every read
fails with ETIMEDOUT; this prints how long after its own request each one
failed, as a JSON line: every connection counted once, by what happened to
it (refused or failed at connect, timed out reading, answered or ended,
another error, still waiting when the run gave up), the spread of the read
deadlines that fired, and a verdict that says which it was.

The deadline is read_timeout from the policy in NETSHIM_POLICY (the caller
sets it); without the shim the reads would wait for ever, so a run without
it stops after --give-up seconds and says so."""
import argparse
import asyncio
import errno
import json
import os
import resource
import subprocess
import sys
import time

SERVER = r'''
import asyncio, resource, sys
s, h = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (h, h))
held = []
async def hold(r, w):
    held.append(w)
async def main():
    srv = await asyncio.start_server(hold, "127.0.0.1", 0, backlog=4096)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
'''


async def one(port, sem, out):
    async with sem:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError as e:
            # an open breaker refuses (ECONNREFUSED), a connect deadline
            # fires (ETIMEDOUT): counted apart from the reads
            out.append(("connect " + errno.errorcode.get(e.errno, str(e.errno)), 0.0))
            return
    w.write(b"GET / HTTP/1.0\r\n\r\n")
    await w.drain()
    t0 = time.monotonic()
    try:
        await r.read(100)
        out.append(("EOF", time.monotonic() - t0))
    except OSError as e:
        out.append((errno.errorcode.get(e.errno, str(e.errno)), time.monotonic() - t0))
    finally:
        w.close()


async def run(n, port, give_up):
    out = []
    sem = asyncio.Semaphore(256)   # connects in flight at once
    tasks = [asyncio.create_task(one(port, sem, out)) for _ in range(n)]
    done, pending = await asyncio.wait(tasks, timeout=give_up)
    for t in pending:
        t.cancel()
    return out, len(pending)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--give-up", type=float, default=60.0)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < a.n + 64:
        print(json.dumps({"error": f"descriptor limit {hard} is below {a.n + 64}"}))
        return 1
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "NETSHIM_POLICY")}
    srv = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = int(srv.stdout.readline())
        t0 = time.monotonic()
        out, stuck = asyncio.run(run(a.n, port, a.give_up))
        took = time.monotonic() - t0
    finally:
        srv.kill()
        srv.wait()
    kinds = {}
    for k, _ in out:
        kinds[k] = kinds.get(k, 0) + 1
    ts = sorted(t for k, t in out if k == "ETIMEDOUT")
    refused = kinds.get("connect ECONNREFUSED", 0)
    connect_failed = sum(v for k, v in kinds.items() if k.startswith("connect ")) - refused
    answered = kinds.get("EOF", 0)
    other = len(out) - refused - connect_failed - len(ts) - answered
    rep = {"connections": a.n, "refused": refused, "connect_failed": connect_failed, "timed_out": len(ts),
           "answered_or_ended": answered, "other_errors": other, "still_waiting": stuck,
           "results": kinds, "seconds": round(took, 2)}
    if len(ts) == a.n:
        rep["verdict"] = "every read deadline fired"
    elif refused:
        rep["verdict"] = (f"{refused} of {a.n} connects refused (an open breaker refuses at once: under load "
                          f"connects that miss connect_timeout open it; shimctl status counts them as rejected); "
                          f"{len(ts)} read deadlines fired")
    else:
        rep["verdict"] = f"{len(ts)} of {a.n} read deadlines fired; see results"
    if ts:
        rep.update({"fired_after_ms": {"min": round(ts[0] * 1000, 1), "p50": round(ts[len(ts) // 2] * 1000, 1),
                                       "p99": round(ts[min(len(ts) - 1, len(ts) * 99 // 100)] * 1000, 1),
                                       "max": round(ts[-1] * 1000, 1)}})
    print(json.dumps(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
