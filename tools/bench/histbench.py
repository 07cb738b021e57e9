#!/usr/bin/python3
"""make bench, section 9: what the history costs and how fast it replays.

1. Recording: netshim-agent --history (no fleet) while 8 processes under the
   shim make keep-alive HTTP exchanges as fast as they can; the rows must
   equal the table's counters, and the agent's CPU is read from /proc.
2. Replay: a day of history for 1,000 destinations at 100 outcomes a second
   in all (8,640,000 rows, 2 % failures in bursts), written straight into a
   database the agent made; shimctl backtest of a policy over it, timed.

usage: histbench.py BUILD [PROCS] [EXCHANGES_EACH] [DAY_ROWS]"""
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1]
PROCS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
EACH = int(sys.argv[3]) if len(sys.argv) > 3 else 12500
DAY = int(sys.argv[4]) if len(sys.argv) > 4 else 8_640_000
tmp = tempfile.mkdtemp(prefix="histbench.")
table = f"nshistbench.{os.getpid()}"
env = dict(os.environ, NETSHIM_TABLE=table)
env.pop("NETSHIM_POLICY", None)


def ctl(*a):
    return subprocess.run([f"{BUILD}/shimctl", *a], capture_output=True, text=True, env=env)


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def start_agent(db):
    a = subprocess.Popen([f"{BUILD}/netshim-agent", "--history", db, "--table", table],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    for _ in range(250):
        s = json.loads(ctl("status", "--json").stdout or "{}")
        if (s.get("agent") or {}).get("history"):
            return a
        time.sleep(0.02)
    raise SystemExit("histbench: the agent did not start")


ctl("status")
db = f"{tmp}/rec.db"
agent = start_agent(db)
c0, t0 = cpu_s(agent.pid), time.monotonic()
procs = [subprocess.Popen([f"{BUILD}/bench", "keepalive", str(EACH)], stdout=subprocess.DEVNULL,
                          env=dict(env, LD_PRELOAD=f"{BUILD}/libnetshim.so")) for _ in range(PROCS)]
for p in procs:
    p.wait()
wall = time.monotonic() - t0
time.sleep(0.5)                       # a pass or more after the last outcome
c1 = cpu_s(agent.pid)
agent.terminate()
agent.wait()
entries = json.loads(ctl("status", "--json").stdout)["entries"]
counted = sum(e["successes"] + e["failures"] + e["rejected"] for e in entries)
c = sqlite3.connect(db)
rows = c.execute("SELECT count(*) FROM outcomes").fetchone()[0]
lost = (c.execute("SELECT value FROM meta WHERE key = 'lost'").fetchone() or ("0",))[0]
c.close()
rate = rows / wall
print(f"  recording: {PROCS} processes, {rows:,} outcomes in {wall:.1f} s ({rate:,.0f}/s); the table counted "
      f"{counted:,} ({'equal' if rows == counted else 'DIFFERENT'}), lost {lost}; agent CPU "
      f"{(c1 - c0) / wall * 100:.1f} % of a core, {(c1 - c0) / wall * 100 * 10000 / max(rate, 1):.1f} % per "
      f"10,000 outcomes/s (bar: under 20 % at 10,000/s)")

# 2. a day, made directly (the agent makes the schema)
day = f"{tmp}/day.db"
agent = start_agent(day)
agent.terminate()
agent.wait()
c = sqlite3.connect(day)
c.execute("PRAGMA journal_mode=OFF")
c.execute("PRAGMA synchronous=OFF")
c.executemany("INSERT INTO dests(id, key) VALUES (?, ?)",
              [(i + 1, f"10.0.{i // 250}.{i % 250 + 1}:443") for i in range(1000)])
now = int(time.time() * 1000)
start = now - DAY * 10            # 100 a second: 10 ms apart
t = time.monotonic()
# every 100th destination has an outage (all failures) for 2 minutes every 4 hours
c.execute("""WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
             INSERT INTO outcomes SELECT ? + i * 10, i * 10000, 1 + i % 1000,
               CASE WHEN (i % 1000) % 100 = 0 AND (i / 100) % 14400 < 120 THEN 2 ELSE 1 END,
               0, i * 10000, i * 10000, ((1 + i % 1000) << 32) | (i + 1), 50000 + i % 7 * 1000, 200 FROM n""",
          (DAY, start))
c.commit()
c.close()
made = time.monotonic() - t
pol = f"{tmp}/p.conf"
with open(pol, "w") as f:
    f.write("[defaults]\nconsecutive_failures = 5\nopen_duration = 30s\n")
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t = time.monotonic()
p = subprocess.run([f"{BUILD}/shimctl", "backtest", pol, "--history", day, "--since", "2d", "--json"],
                   capture_output=True, text=True, env=env)
took = time.monotonic() - t
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
if p.returncode != 0:
    raise SystemExit("histbench: backtest failed: " + p.stderr)
doc = json.loads(p.stdout)
trips = sum(len(d["transitions"]) for d in doc["destinations"])
print(f"  replay: {doc['outcomes']:,} outcomes of {len(doc['destinations'])} destinations (a day at 100/s, made in "
      f"{made:.0f} s) through a candidate in {took:.1f} s ({trips} transitions; {r1.ru_maxrss // 1024} MiB at most) "
      f"(bar: under 60 s)")
os.unlink(f"/dev/shm/{table}")
for suffix in (".outcomes",):
    try:
        os.unlink(f"/dev/shm/{table}{suffix}")
    except FileNotFoundError:
        pass
