#!/usr/bin/python3
"""make bench: how late a connect waiting for a place (max_connections)
starts after one frees. PROCS processes of THREADS threads each connect,
hold the connection HOLD ms and close, ROUNDS times, under the shim with
max_connections = CAP; every connect that had to wait is matched with the
last close before it returned (CLOCK_MONOTONIC is one clock for every
process), and the gaps are printed as p50/p99, for blocking connects and
for non-blocking ones (a poll loop, as event loops wait).

usage: queuebench.py BUILD [PROCS THREADS CAP]"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

WORKER = r"""
import json, select, socket, sys, threading, time
port, threads, rounds, hold, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
ev = []
lock = threading.Lock()
def one():
    mine = []
    for _ in range(rounds):
        s = socket.socket()
        t0 = time.monotonic()
        if mode == "blocking":
            s.connect(("127.0.0.1", port))
        else:
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            p = select.poll()
            p.register(s.fileno(), select.POLLOUT)
            while not p.poll(1000):
                pass
        t1 = time.monotonic()
        time.sleep(hold)
        t2 = time.monotonic()
        s.close()
        mine.append((t0, t1, t2))
    with lock:
        ev.extend(mine)
ts = [threading.Thread(target=one) for _ in range(threads)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps(ev))
"""


def serve(sock, stop):
    conns = []
    while not stop.is_set():
        try:
            c, _ = sock.accept()
        except OSError:
            return
        conns.append(c)   # never read: the client closes; nothing to answer
        if len(conns) > 256:
            for x in conns[:-64]:
                x.close()
            del conns[:-64]


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100))] if v else float("nan")


def main():
    build = sys.argv[1]
    procs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    cap = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    rounds, hold = 10, 0.02
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1024)
    stop = threading.Event()
    threading.Thread(target=serve, args=(srv, stop), daemon=True).start()
    port = srv.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        pol = os.path.join(tmp, "cap.conf")
        with open(pol, "w") as f:
            f.write(f"[defaults]\nmax_connections = {cap}\nqueue_timeout = 60s\n")
        script = os.path.join(tmp, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        for mode in ("blocking", "nonblocking"):
            env = dict(os.environ, NETSHIM_TABLE=f"queuebench.{os.getpid()}.{mode}", NETSHIM_POLICY=pol,
                       LD_PRELOAD=os.path.join(build, "libnetshim.so"))
            t0 = time.monotonic()
            ps = [subprocess.Popen([sys.executable, script, str(port), str(threads), str(rounds), str(hold), mode],
                                   stdout=subprocess.PIPE, text=True, env=env) for _ in range(procs)]
            ev = []
            for p in ps:
                out, _ = p.communicate(timeout=600)
                ev += json.loads(out)
            wall = time.monotonic() - t0
            try:
                os.unlink(f"/dev/shm/{env['NETSHIM_TABLE']}")
            except FileNotFoundError:
                pass
            # each close while someone waited (a connect begun before it
            # returns after it): how long until a connect returns, the
            # place taken again (by whoever gets it: waiters are not queued
            # in order, a fresh connect may take a place that frees)
            done = sorted(e[1] for e in ev)
            gaps, waited = [], sum(1 for e in ev if e[1] - e[0] >= 0.002)
            import bisect
            for tc in sorted(e[2] for e in ev):
                if not any(s < tc < d for s, d, _ in ev):
                    continue
                i = bisect.bisect_right(done, tc)
                if i < len(done):
                    gaps.append((done[i] - tc) * 1000)
            ideal = len(ev) * hold / cap
            print(f"  {mode:11s} {procs} processes x {threads} = {procs * threads} waiters, cap {cap}: "
                  f"{len(ev)} connects ({waited} waited), from a close (someone waiting) to the next connect's return "
                  f"p50 {pct(gaps, 50):.2f} ms, p99 {pct(gaps, 99):.2f} ms; "
                  f"{wall:.2f} s for {ideal:.2f} s of held time")
    stop.set()
    srv.close()


if __name__ == "__main__":
    main()
