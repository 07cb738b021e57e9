#!/usr/bin/env python3
"""e2ebench.py -- the fleet end to end (make bench-fleet): two tables stand
for machines A and B, each with a real netshim-agent on one Redis (quorum
1). In each trial a program on A fails a call (a server that resets after
the request), its breaker opens, and a program on B that connects in a loop
meanwhile (every half millisecond) is refused: the time from A's failing
call returning to B's first refused connect returning, both on
CLOCK_MONOTONIC. Between trials an
operator's reset on A closes the destination everywhere.

  e2ebench.py BUILD REDIS_PORT [TRIALS [POLL_MS]]"""
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

BUILD = pathlib.Path(sys.argv[1]).resolve()
PORT = int(sys.argv[2])
TRIALS = int(sys.argv[3]) if len(sys.argv) > 3 else 50
POLL_MS = int(sys.argv[4]) if len(sys.argv) > 4 else 500

FAIL = r'''
import json, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
try:
    s.recv(100)
    r = "answered"
except OSError as e:
    r = type(e).__name__
print(json.dumps({"t": time.monotonic(), "r": r}), flush=True)
'''

LOOP = r'''
import json, socket, sys, time
port = int(sys.argv[1])
print("READY", flush=True)
end = time.monotonic() + 10
while time.monotonic() < end:
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
    except ConnectionRefusedError:
        print(json.dumps({"t": time.monotonic()}), flush=True)
        break
    finally:
        s.close()
    time.sleep(0.0005)   # paced: a full accept queue would drop a SYN (a 1 s retransmit)
else:
    print(json.dumps({"t": None}), flush=True)
'''


def main():
    tmp = pathlib.Path(tempfile.mkdtemp())
    (tmp / "fail.py").write_text(FAIL)
    (tmp / "loop.py").write_text(LOOP)
    (tmp / "a.conf").write_text("[defaults]\nfailure_threshold = 1\nopen_duration = 30s\n")
    (tmp / "b.conf").write_text("[defaults]\nfailure_threshold = 5\n")
    tables = {n: f"e2e.{os.getpid()}.{n}.{uuid.uuid4().hex[:6]}" for n in "ab"}
    srv = subprocess.Popen([str(BUILD / "faultsrv"), "--mode", "reset-request"], stdout=subprocess.PIPE, text=True)
    port = int(srv.stdout.readline().split()[1])
    dest = f"127.0.0.1:{port}"
    env = {n: dict(os.environ, NETSHIM_TABLE=tables[n], NETSHIM_POLICY=str(tmp / f"{n}.conf")) for n in "ab"}
    for e in env.values():
        e.pop("LD_PRELOAD", None)
    agents = []
    for n in "ab":
        # the table exists once a program ran under it
        subprocess.run([str(BUILD / "shimrun"), "--", "true"], env=env[n], check=True)
        agents.append(subprocess.Popen([str(BUILD / "netshim-agent"), "--redis", f"redis://127.0.0.1:{PORT}",
                                        "--node", n, "--fleet", f"e2e{os.getpid()}", "--table", tables[n],
                                        "--quorum", "1", "--poll-ms", str(POLL_MS)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1)
    shim = [str(BUILD / "shimrun"), "--", sys.executable]
    ms, missed = [], 0
    try:
        for _ in range(TRIALS):
            loop = subprocess.Popen(shim + [str(tmp / "loop.py"), str(port)], env=env["b"], stdout=subprocess.PIPE,
                                    text=True)
            assert loop.stdout.readline().strip() == "READY"
            time.sleep(0.05)
            a = subprocess.run(shim + [str(tmp / "fail.py"), str(port)], env=env["a"], capture_output=True,
                               text=True, timeout=20)
            ta = json.loads(a.stdout.strip().splitlines()[-1])
            tb = json.loads(loop.stdout.readline())["t"]
            loop.wait()
            if ta["r"] != "ConnectionResetError" or tb is None:
                missed += 1
            else:
                ms.append((tb - ta["t"]) * 1000)
            subprocess.run([str(BUILD / "shimctl"), "--table", tables["a"], "reset", dest], env=env["a"],
                           capture_output=True)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                st = subprocess.run([str(BUILD / "shimctl"), "--table", tables["b"], "status", "--json"],
                                    env=env["b"], capture_output=True, text=True)
                e = {x["destination"]: x for x in json.loads(st.stdout)["entries"]}.get(dest)
                if not e or e["state"] != "fleet_open":
                    break
                time.sleep(0.01)
            time.sleep(0.1)
    finally:
        for p in agents + [srv]:
            p.terminate()
            p.wait()
        for t in tables.values():
            try:
                os.unlink(f"/dev/shm/{t}")
            except FileNotFoundError:
                pass
    ms.sort()
    q = lambda f: ms[min(len(ms) - 1, int(f * len(ms)))] if ms else float("nan")
    print(f"trials {TRIALS}")
    print(f"missed {missed}")
    print(f"e2e_ms_p50 {statistics.median(ms) if ms else float('nan'):.2f}")
    print(f"e2e_ms_p99 {q(0.99):.2f}")
    print(f"e2e_ms_max {ms[-1] if ms else float('nan'):.2f}")
    print(f"e2e_ms_min {ms[0] if ms else float('nan'):.2f}")


main()
