"""Limits for the fleet (issue 51): fleet_max_requests, fleet_max_connections
and fleet_rate, a limit for every machine together, each machine keeping
to the share its agent leases through Redis.

Each machine is a table of its own with its agent (the agents read the
programs' policy through NETSHIM_POLICY), all agents on one redis-server
(and on the Redis Cluster the suite starts). The server counts what it has
in flight itself (test_requests.InflightServer: from a request's head to
just before its answer's last byte), so a request let in over the fleet's
limit overlaps the others and is counted.

Negative control: without agents (NETSHIM_FLEET_NO_AGENT=1) each machine
keeps the whole limit to itself and the server sees it over: every test
marked `agent` fails."""
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import BUILD, ROOT, py_script, shimrun_spawn as spawn, wait_all
from test_fleet import NO_AGENT, Node, redis  # noqa: F401 (its fixture: one redis-server, and the cluster)
from test_engine import gobins  # noqa: F401  (the Go clients, built once)
from test_requests import InflightServer

POLL_MS = 200
# the hammering tests' length: 20 s and 12 s in the suite; the issue's
# 60 s run: NETSHIM_FLEET_SECS=60
LONG = float(os.environ.get("NETSHIM_FLEET_SECS", 0))

HAMMER = """
import json, sys, time, requests
url, secs, threads = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
import threading
ok, bad = [0], []
end = time.monotonic() + secs
def worker():
    s = requests.Session()
    while time.monotonic() < end:
        try:
            r = s.get(url, timeout=120)
            if r.status_code == 200 and len(r.content) == 16384:
                ok[0] += 1
            else:
                bad.append(r.status_code)
        except Exception as e:
            bad.append(repr(e)[:80])
            time.sleep(0.05)
ts = [threading.Thread(target=worker) for _ in range(threads)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps({"ok": ok[0], "bad": bad[:5], "nbad": len(bad)}))
"""


class Machine(Node):
    """A table, its policy (the fleet's keys) and its agent, which reads it."""

    def __init__(self, name, tmp, redis_url, policy):
        super().__init__(name, tmp, redis_url)
        self.shim.policy(policy)

    def start_agent(self, poll_ms=POLL_MS):
        super().start_agent(poll_ms=poll_ms, env=dict(os.environ, NETSHIM_POLICY=str(self.shim.policy_path)))

    def kill_agent(self, sig=signal.SIGTERM):
        if self.agent:
            self.agent.send_signal(sig)
            self.agent.wait(timeout=10)
            self.agent = None

    def share(self, dest, kind="requests"):
        e = self.shim.entry(dest)
        return (e.get("fleet_share") or {}).get(kind) if e else None


@pytest.fixture
def machines(tmp_path, redis):
    made = []

    def make(n, policy, poll_ms=POLL_MS):
        for _ in range(n):
            made.append(Machine(f"m{len(made) + 1}", tmp_path, redis.url, policy))
        for m in made[-n:]:
            m.start_agent(poll_ms)
        return made[-n:]

    yield make
    for m in made:
        m.kill_agent()
        m.shim.cleanup()


@pytest.fixture
def inflight():
    s = InflightServer(hold=0.2)
    yield s
    s.stop()


def evals(redis):
    """EVAL calls the single redis-server has served."""
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_eval:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def polls(ms):
    """The Redis polls the machines' agents have made."""
    return sum((json.loads(m.shim.ctl("status", "--json").stdout)["agent"] or {}).get("polls", 0) for m in ms)


def policy(srv, keys):
    """One section for srv's destination: keys, and a minute's queue."""
    return f"[host \"127.0.0.1:{srv.port}\"]\n{keys}\nqueue_timeout = 60s\n"


def busy(ms, srv, hold_ms, secs, threads, session=True):
    """HAMMER started on each machine (its processes)."""
    py = py_script(ms[0].shim.tmp, HAMMER if session else HAMMER.replace("s = requests.Session()", "s = requests"))
    return [spawn(m.shim, py + [f"{srv.url}hold/{hold_ms}", secs, threads]) for m in ms]


def single_only(redis, why):
    """Skipped on the Redis Cluster (a test of the single redis-server)."""
    if not hasattr(redis, "proc"):
        pytest.skip(why)


def jain(xs):
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0


def hammer(ms, srv, secs, threads, hold_ms=200):
    procs = busy(ms, srv, hold_ms, secs, threads)
    return [json.loads(o.strip().splitlines()[-1]) if rc == 0 else (rc, e) for rc, o, e in wait_all(procs, 300)]


@pytest.mark.agent
def test_ten_machines_never_have_more_than_the_fleets_limit_in_flight_and_share_it_evenly(machines, inflight):
    # 10 machines x 8 sessions (80 wanted at once) against fleet_max_requests
    # = 40: the server never has more than 40 requests in flight; the limit
    # is used (at least 30 at once at some point, 90 % of the ideal
    # throughput over the last 10 s), and the machines are served evenly
    # (Jain's index over their answers >= 0.95)
    pol = policy(inflight, "fleet_max_requests = 40")
    ms = machines(10, pol)
    t0 = time.monotonic()
    secs = LONG or 20
    res = hammer(ms, inflight, secs, 8)
    took = time.monotonic() - t0
    for r in res:
        assert isinstance(r, dict) and r["nbad"] == 0, (r, [m.log() for m in ms][:2])
    oks = [r["ok"] for r in res]
    print(f"fleet_max_requests = 40, 10 machines, {secs:g} s: peak {inflight.peak} in flight, {sum(oks)} answers, "
          f"per machine {min(oks)}-{max(oks)}, Jain {jain(oks):.3f}")
    assert inflight.peak <= 40, (inflight.peak, oks)
    assert inflight.peak >= 30, (inflight.peak, oks)
    # the ideal: 40 at once, each ~0.21 s
    assert sum(oks) >= 0.6 * 40 / 0.21 * secs, (sum(oks), took)
    assert jain(oks) >= 0.95, oks
    shares = [m.share(inflight.dest) for m in ms]
    assert all(s is not None for s in shares) and sum(shares) <= 40, shares


def shares_of(ms, dest, kind="requests"):
    return [m.share(dest, kind) for m in ms]


def wait_shares_polls(ms, dest, pred, timeout, kind="requests", polls=True):
    """(seconds, [polls each machine's agent made]) from now until
    pred(the machines' shares) holds, each share read with its agent's poll
    count in one status; (None, None) if it does not. polls=False: the
    shares alone (no agent need have run), the polls None."""
    def look():
        if not polls:
            return shares_of(ms, dest, kind), None
        docs = [m.status_doc() for m in ms]
        return ([next(((e.get("fleet_share") or {}).get(kind) for e in d["entries"] if e["destination"] == dest),
                      None) for d in docs], [d["agent"]["polls"] for d in docs])

    p0 = look()[1]
    t0 = time.monotonic()
    while time.monotonic() - t0 < (1.0 if NO_AGENT else timeout):
        sh, p1 = look()
        if all(x is not None for x in sh) and pred(sh):
            return time.monotonic() - t0, p1 and [b - a for a, b in zip(p0, p1)]
        time.sleep(0.02)
    return None, None


def wait_shares(ms, dest, pred, timeout, kind="requests"):
    """Seconds until pred(the machines' shares) holds, or None."""
    return wait_shares_polls(ms, dest, pred, timeout, kind, polls=False)[0]


@pytest.mark.agent
@pytest.mark.parametrize("poll_ms", [1000])
def test_machines_that_go_idle_hand_their_shares_to_the_busy_within_two_polls(machines, inflight, poll_ms):
    # 10 machines, all busy, then 5 of them stop: the 5 still busy reach
    # 8 each (40 / 5) and the shares never sum above 40. How soon: an idle
    # agent lets go at its next tick (a demand fallen to half its share:
    # a lease between polls, at most one a poll), and that lease counts the
    # level again (or has the next call a quarter poll on count it); each
    # busy machine takes its part at its next poll: 2 polls at worst,
    # measured 1 (0.96-1.0 s at a poll of 1 s). The tree before let go at
    # the idle agent's poll and counted the level at most once a poll: up
    # to 3 (1.0-1.1 s here, 2.7-2.8 s in some runs of a loaded machine).
    # At a poll long beside the machine's scheduling slack: at 200 ms a
    # bound of a second in all was missed once under four busy loops
    pol = policy(inflight, "fleet_max_requests = 40")
    ms = machines(10, pol, poll_ms)
    going = busy(ms[:5], inflight, 200, 16, 8)
    idle = busy(ms[5:], inflight, 200, 6, 8)
    assert wait_shares(ms, inflight.dest, lambda sh: max(sh) <= 5, 5) is not None  # all busy: 4 each
    wait_all(idle)
    # counted in the agents' own polls, not seconds: a starved agent polls
    # late (3.6 s at a poll of 1 s in a CI run, three test files at once
    # beside a Redis Cluster); one poll more for the time a sample of five
    # tables takes
    t, polls = wait_shares_polls(ms[:5], inflight.dest, lambda sh: min(sh) >= 8, 10)
    print(f"5 of 10 machines idle: the busy at 8 each in {t} s, their agents' polls {polls}")
    sums = [sum(x or 0 for x in shares_of(ms, inflight.dest)) for _ in range(5)]
    res = wait_all(going)
    assert all(rc == 0 for rc, _, _ in res), res
    assert polls is not None and max(polls) <= 2 + 1, (t, polls)
    assert max(sums) <= 40 and inflight.peak <= 40, (sums, inflight.peak)


@pytest.mark.agent
@pytest.mark.parametrize("poll_ms", [1000])
def test_machines_that_join_busy_get_their_shares_within_two_polls(machines, inflight, poll_ms):
    # at the agents' poll of 1 s (a poll long beside the machine's
    # scheduling slack): 3 machines busy share 12 (4 each); a 4th joins
    # busy and has its share (3) within 2 polls of its first request, then
    # a 5th (12 / 5: 2 or 3), the shares never above 12. The chain: a
    # joiner's first lease counts the level again (or has the next lease a
    # quarter poll on count it); the others shrink to it at their next poll
    # (at most 1 + 1/4) and lease again as soon as their requests beyond it
    # end (a hold of 0.2 s); the joiner, held below its share, asks again
    # every half poll: at most 1.75 polls + 0.25 s. The tree before (the
    # others saw the joiner at their poll after the next count and let go
    # a poll later, the joiner took it at its poll) took 1.9-2.8 s each:
    # the two together at most 3 polls
    pol = policy(inflight, "fleet_max_requests = 12")
    ms = machines(3, pol, poll_ms)
    going = busy(ms, inflight, 200, 16, 6)
    assert wait_shares(ms, inflight.dest, lambda sh: sh == [4, 4, 4], 5) is not None
    took, sums, joiners = [], [], []
    for want in (3, 2):
        (late,) = machines(1, pol, poll_ms)
        joiners += busy([late], inflight, 200, 12 - 5 * len(took), 6)
        assert wait_for_true(lambda: late.shim.entry(inflight.dest) is not None, 10)
        t0, p0 = time.monotonic(), late.status_doc()["agent"]["polls"]
        while time.monotonic() - t0 < 10 and (late.share(inflight.dest) or 0) < want:
            sums.append(sum(x or 0 for x in shares_of(ms + [late], inflight.dest)))
        # counted in the joiner's own polls (a starved agent polls late),
        # one more for the time a sample takes
        took.append((time.monotonic() - t0, late.status_doc()["agent"]["polls"] - p0))
        ms.append(late)
        time.sleep(1)
    res = wait_all(going + joiners, 300)
    assert all(rc == 0 for rc, _, _ in res), res
    assert all(t < 10 for t, _ in took), took
    assert max(p for _, p in took) <= 2 + 1 and sum(p for _, p in took) <= 3 + 2, took
    assert max(sums) <= 12 and inflight.peak <= 12, (sums, inflight.peak)


@pytest.mark.agent
def test_a_machine_that_joins_gets_its_share_and_a_killed_agents_share_goes_back_to_the_others(machines, inflight):
    # 3 machines busy share 12 (4 each); a 4th joins busy and gets 3 (how
    # soon: the test before, at a poll long beside a loaded machine's
    # slack); then its agent is SIGKILLed: its share lapses there
    # (nothing starts: its requests wait) and returns to the other three
    # within its lease (3 polls and a second); the server never above 12
    pol = policy(inflight, "fleet_max_requests = 12")
    ms = machines(3, pol)
    going = busy(ms, inflight, 200, 12, 6)
    assert wait_shares(ms, inflight.dest, lambda sh: sh == [4, 4, 4], 5) is not None
    (late,) = machines(1, pol)
    (joiner,) = busy([late], inflight, 200, 4, 6)
    # (from its first request: the destination's slot made in its table)
    assert wait_for_true(lambda: late.shim.entry(inflight.dest) is not None, 10)
    t_join = wait_shares([late], inflight.dest, lambda sh: sh[0] >= 3, 5)
    assert t_join is not None, t_join
    late.kill_agent(signal.SIGKILL)
    t_back = wait_shares(ms, inflight.dest, lambda sh: sum(sh) == 12, 5)
    assert t_back is not None and t_back <= 2 * (3 * POLL_MS + 1000) / 1000 + 0.6, t_back
    e = late.shim.entry(inflight.dest)
    assert e["fleet_share"]["lease_left_ms"] == 0, e
    wait_all(going)
    joiner.kill()
    joiner.wait()
    assert inflight.peak <= 12, inflight.peak


@pytest.mark.agent
def test_redis_lost_keeps_each_share_at_most_the_limit_over_the_machines_said_once(machines, inflight, redis):
    # Redis gone mid-run: each machine keeps min(its last share, 12 / 3),
    # the agents say so once, the server never sees more than 12; Redis
    # back: leased again (said)
    single_only(redis, "a single redis-server is killed here; the cluster's failover has its own test")
    ms = machines(3, policy(inflight, "fleet_max_requests = 12"))
    going = busy(ms, inflight, 100, 8, 6)
    assert wait_shares(ms, inflight.dest, lambda sh: sh == [4, 4, 4], 5) is not None
    redis.kill()
    time.sleep(5 * POLL_MS / 1000)
    during = shares_of(ms, inflight.dest)
    lefts = [m.shim.entry(inflight.dest)["fleet_share"]["lease_left_ms"] for m in ms]
    redis.start()
    res = wait_all(going)
    assert all(rc == 0 and json.loads(o.strip().splitlines()[-1])["nbad"] == 0 for rc, o, _ in res), res
    assert during == [4, 4, 4] and min(lefts) > 0, (during, lefts)
    assert inflight.peak <= 12, inflight.peak
    for m in ms:
        assert m.log().count("redis unreachable: each fleet limit kept") == 1, m.log()


@pytest.mark.agent
def test_a_destination_first_used_while_redis_is_lost_gets_the_limit_over_the_machines_last_seen(
        machines, inflight, redis):
    # 3 machines leased one destination (4 of 12 each); Redis gone, their
    # programs begin another destination never leased: each machine keeps
    # its limit over the 3 machines the leases last named, not the whole
    # (before: 12 each, 36 at once against a fleet limit of 12)
    single_only(redis, "a single redis-server is killed here")
    other = InflightServer(hold=0.2)
    try:
        ms = machines(3, policy(inflight, "fleet_max_requests = 12") + policy(other, "fleet_max_requests = 12"))
        going = busy(ms, inflight, 100, 3, 6)
        assert wait_shares(ms, inflight.dest, lambda sh: sh == [4, 4, 4], 5) is not None
        wait_all(going)
        redis.kill()
        time.sleep(3 * POLL_MS / 1000)
        going = busy(ms, other, 100, 3, 6)
        t = wait_shares(ms, other.dest, lambda sh: all(x is not None and x > 0 for x in sh), 10)
        during = shares_of(ms, other.dest)
        res = wait_all(going)
        redis.start()
        assert t is not None and during == [4, 4, 4], (during, [m.log() for m in ms])
        assert all(rc == 0 and json.loads(o.strip().splitlines()[-1])["nbad"] == 0 for rc, o, _ in res), res
        assert other.peak <= 12, other.peak
    finally:
        other.stop()


@pytest.mark.agent
def test_a_machine_whose_first_lease_gets_no_answer_takes_nothing_until_one_does(machines, inflight, redis):
    # 2 machines busy at 6 of 12 each; Redis stops answering (SIGSTOP: the
    # links stand, each command times out) just as a third machine's
    # programs begin: its agent's first lease of the destination fails, and
    # it knows of no machine (no lease of its own ever answered). It takes
    # nothing until a lease answers, not the whole (before: 12, 18 at once
    # at the server against 12; the cluster CI run's 43 of 40 was this: a
    # first lease timed out on a loaded machine)
    single_only(redis, "a single redis-server is stopped here")
    ms = machines(3, policy(inflight, "fleet_max_requests = 12"))
    going = busy(ms[:2], inflight, 100, 9, 6)
    assert wait_shares(ms[:2], inflight.dest, lambda sh: sh == [6, 6], 5) is not None, [m.log() for m in ms]
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        third = busy(ms[2:], inflight, 100, 4, 6)
        t = wait_shares(ms[2:], inflight.dest, lambda sh: True, 5)
        time.sleep(1.5)    # (the lease's 1 s timeout, then the share it holds)
        during = shares_of(ms, inflight.dest)
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    res = wait_all(going + third, 120)
    assert all(rc == 0 and json.loads(o.strip().splitlines()[-1])["nbad"] == 0 for rc, o, _ in res), res
    assert t is not None and during[2] == 0, (during, ms[2].log())
    assert inflight.peak <= 12, (inflight.peak, during, ms[2].log())
    assert "no lease has answered" in ms[2].log(), ms[2].log()


@pytest.mark.agent
def test_fleet_max_connections_caps_the_connections_of_every_machine_together(machines, inflight):
    # programs that open a connection per request (no session): 5 machines
    # x 6 threads, fleet_max_connections = 10: never more than 10 at the
    # server at once
    pol = policy(inflight, "fleet_max_connections = 10")
    ms = machines(5, pol)
    procs = busy(ms, inflight, 100, 8, 6, session=False)
    res = wait_all(procs, 300)
    oks = []
    for rc, o, e in res:
        assert rc == 0, e
        r = json.loads(o.strip().splitlines()[-1])
        assert r["nbad"] == 0, r
        oks.append(r["ok"])
    assert inflight.peak <= 10, (inflight.peak, oks)
    assert inflight.peak >= 8 and jain(oks) >= 0.9, (inflight.peak, oks)


@pytest.mark.agent
def test_fleet_rate_keeps_every_second_at_the_fleets_rate_and_uses_it(machines, inflight):
    # 5 machines x 4 threads asking as fast as answered, fleet_rate = 50/s:
    # in every whole second of the run the server sees at most 50 (+2: the
    # shares sum to 50 a second, but a machine's bucket at 10.5/s lets 11
    # into a second, and loopback moves a request across a second's edge)
    # and on average at least 45; the machines served evenly
    pol = policy(inflight, "fleet_rate = 50/s")
    ms = machines(5, pol)
    start, run = time.monotonic(), LONG or 12
    res = hammer(ms, inflight, run, 4, hold_ms=0)
    assert all(isinstance(r, dict) for r in res), res
    times = sorted(t for t, _ in inflight.log)
    t0 = times[0] + 2   # after the first leases
    secs = {}
    whole = int(start + run - 1 - t0)   # the whole seconds before the clients' last
    for t in times:
        if t0 <= t < t0 + whole:
            secs[int(t - t0)] = secs.get(int(t - t0), 0) + 1
    counts = [secs.get(i, 0) for i in range(whole)]
    print(f"fleet_rate = 50/s, 5 machines, {run:g} s: a second {min(counts)}-{max(counts)}, "
          f"mean {sum(counts) / len(counts):.1f}")
    why = (counts, res, [{k: v for k, v in (m.shim.entry(inflight.dest) or {}).items()
                          if k in ("fleet_share", "paced", "rate_tokens", "throttled", "calls", "successes")}
                         for m in ms], [m.log()[-300:] for m in ms])
    print("WHY", json.dumps(why, default=str))
    assert max(counts) <= 52, why
    assert sum(counts) / len(counts) >= 45, why
    assert jain([r["ok"] for r in res]) >= 0.9, why


@pytest.mark.agent
def test_machines_whose_policies_disagree_keep_to_the_smallest_limit_and_say_so(machines, inflight):
    # one machine's policy says 10, the other's 6: together never above 6
    # once both have leased, and the one that says 10 logs that the
    # smallest holds
    big = machines(1, policy(inflight, "fleet_max_requests = 10"))
    small = machines(1, policy(inflight, "fleet_max_requests = 6"))
    ms = big + small
    procs = busy(ms, inflight, 100, 6, 8)
    # (each machine's policy is known to the fleet from its first lease on:
    # before it, the one that says 10 keeps to 10; counted from 1.5 s on,
    # when both have leased)
    time.sleep(1.5)
    with inflight.lock:
        inflight.peak = inflight.cur
    res = [json.loads(o.strip().splitlines()[-1]) for rc, o, e in wait_all(procs, 300)]
    assert all(r["nbad"] == 0 for r in res), res
    assert inflight.peak <= 6, inflight.peak
    assert inflight.peak >= 5, inflight.peak
    # the share in status (text and JSON) and in /metrics (promtool's check)
    # (no policy given to shimctl: the limit is the one the fleet keeps to, the smallest)
    assert f"{inflight.dest}: fleet_max_requests 6: this machine's share " in big[0].shim.ctl("status").stdout
    e = big[0].shim.entry(inflight.dest)["fleet_share"]
    assert e["machines"] == 2 and 0 <= e["requests"] <= 6 and e["lease_left_ms"] > 0, e
    assert e["limits"] == {"requests": 6}, e
    # (the share as status read it just before /metrics or just after: the
    # shares still move as the clients' last requests end)
    met = big[0].shim.ctl("metrics").stdout
    after = big[0].shim.entry(inflight.dest)["fleet_share"]
    line = [x for x in met.splitlines() if x.startswith("netshim_fleet_share{")]
    assert len(line) == 1 and 'limit="fleet_max_requests"' in line[0], line
    assert int(line[0].rsplit(" ", 1)[1]) in (e["requests"], after["requests"]), (line, e, after)
    line = [x for x in met.splitlines() if x.startswith("netshim_fleet_limit{")]
    assert len(line) == 1 and line[0].endswith(" 6"), line
    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=met, capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    assert "fleet_max_requests is 10 in this machine's policy, 6 in another's: the smallest holds" in big[0].log()
    # shimctl check --fleet: each machine's file beside every machine's
    # policy, as its agent leased it: they differ (exit 1), the line named
    dest = inflight.dest
    for m, mine, holds in ((big[0], 10, 6), (small[0], 6, 6)):
        pol = m.shim.policy_path
        r = m.shim.ctl("check", "--fleet", pol)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert (f"{pol}:2: {dest}: fleet_max_requests {mine} here; 6 to 10 in the machines' policies (2 "
                f"machines): the smallest ({holds}) holds for every machine") in r.stdout.splitlines(), r.stdout
    # a file that agrees (as every machine says 6 once the big one's says
    # so, leased again), a section it does not lease named, exit 0
    agree = big[0].shim.tmp / "agree.conf"
    agree.write_text(policy(inflight, "fleet_max_requests = 6") + "[host \"other.example\"]\nfleet_rate = 5/s\n")
    big[0].shim.policy(policy(inflight, "fleet_max_requests = 6"))
    assert wait_for_true(lambda: big[0].shim.entry(dest)["fleet_share"]["limits"] == {"requests": 6} and
                         big[0].shim.ctl("check", "--fleet", agree).returncode == 0, 10)
    r = big[0].shim.ctl("check", "--fleet", agree)
    assert [x for x in r.stdout.splitlines()[1:] if "note:" not in x] == [
        f"{agree}: {dest}: fleet_max_requests 6: as in every machine's policy (2 machines)",
        f"{agree}:5: fleet_rate: no destination it covers is leased on this machine (table {big[0].shim.table}): "
        "not compared"], r.stdout


@pytest.mark.agent
def test_an_agent_leases_every_limit_of_every_destination_in_one_command_a_poll(machines, inflight, redis):
    # three limits on one destination, 2 machines: over 2 s the single
    # redis-server serves at most one EVAL a poll of each agent (one each
    # per limit would be three) while the shares stand still, at most two
    # while they move (a lease between polls: a share let go, or asked
    # again), and every limit has its share
    single_only(redis, "commandstats are per node in a cluster; the single redis-server counts them")
    ms = machines(2, policy(inflight, "fleet_max_requests = 4\nfleet_max_connections = 30\nfleet_rate = 1000/s"))
    e0, p0 = evals(redis), polls(ms)
    busy_ = busy(ms[:1], inflight, 100, 1.5, 6) + busy(ms[1:], inflight, 100, 3, 6)
    res = [json.loads(o.strip().splitlines()[-1]) for rc, o, e in wait_all(busy_, 300)]
    n_eval, n_poll = evals(redis) - e0, polls(ms) - p0
    assert all(r["nbad"] == 0 for r in res), res
    assert n_poll >= 10 and n_eval <= 2 * n_poll + 2, (n_eval, n_poll)
    e0, p0 = evals(redis), polls(ms)
    time.sleep(2)
    n_eval, n_poll = evals(redis) - e0, polls(ms) - p0
    assert n_poll >= 10 and n_eval <= n_poll + 2, (n_eval, n_poll)
    sh = ms[0].shim.entry(inflight.dest)["fleet_share"]
    assert set(sh) == {"requests", "connections", "rate_per_s", "limits", "machines", "lease_left_ms"}, sh
    assert sh["limits"] == {"requests": 4, "connections": 30, "rate_per_s": 1000.0}, sh


@pytest.mark.agent
def test_a_cluster_master_killed_mid_run_never_lets_the_shares_sum_above_the_limit(machines, inflight, redis):
    # Redis Cluster: the master of the fleet's slot is killed while 3
    # machines hammer fleet_max_requests = 12; its replica takes over (a
    # write it had not yet had may be lost): the server never sees more
    # than 12, every request is answered, and the shares are leased again
    if hasattr(redis, "proc"):
        pytest.skip("a failover needs the Redis Cluster")
    pol = policy(inflight, "fleet_max_requests = 12")
    ms = machines(3, pol)
    going = busy(ms, inflight, 100, 10, 6)
    assert wait_shares(ms, inflight.dest, lambda sh: sh == [4, 4, 4], 5) is not None
    owner = redis.master_of("netshim:{default}:seq")
    replica = redis.replica_of(owner)
    redis.kill_node(owner)
    assert wait_for_true(lambda: redis.master_now("netshim:{default}:seq") == replica, 15)
    t = wait_shares(ms, inflight.dest, lambda sh: sum(sh) == 12, 10)
    res = wait_all(going)
    assert all(rc == 0 and json.loads(o.strip().splitlines()[-1])["nbad"] == 0 for rc, o, _ in res), res
    assert t is not None, [m.log() for m in ms]
    assert inflight.peak <= 12, inflight.peak
    # an agent that found the new master within its grace says so, and
    # never that Redis was unreachable (its links were closed, not lost)
    for m in ms:
        log = m.log()
        if "lost (" not in log and "looking for the slots' new masters" in log:
            assert "redis unreachable" not in log, log


def wait_for_true(pred, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.agent
def test_go_programs_under_the_seccomp_engine_keep_to_their_machines_shares(machines, inflight, gobins):
    # static Go clients (shimrun's seccomp engine: a connection per
    # request), 3 machines x 6 goroutines, fleet_max_connections = 6: the
    # server never has more than 6 at once, every machine is served
    pol = policy(inflight, "fleet_max_connections = 6")
    ms = machines(3, pol)
    start = time.time() + 0.5
    procs = [spawn(m.shim, [gobins["hammer-static"], inflight.url + "hold/100", start, start + 6, 6]) for m in ms]
    res = wait_all(procs, 120)
    got = []
    for rc, o, e in res:
        assert rc == 0, e
        r = json.loads(o.strip().splitlines()[-1])
        got.append(r)
    oks = [r["status"].get("200", 0) for r in got]
    assert all(not r["errors"] for r in got), got
    assert inflight.peak <= 6, (inflight.peak, got)
    assert min(oks) > 0 and inflight.peak >= 5, (inflight.peak, got)


ONE_GET = """
import json, sys, time, requests
t0 = time.monotonic()
r = requests.get(sys.argv[1], timeout=60)
print(json.dumps({"status": r.status_code, "s": time.monotonic() - t0}))
"""


@pytest.mark.agent
def test_a_destinations_first_request_asks_the_agent_for_its_share_at_once_not_at_the_next_poll(tmp_path, redis,
                                                                                                inflight):
    # polls 10 s apart: a program's first request to a fleet-limited
    # destination (no share yet, so it waits) makes the agent lease at its
    # next tick (50 ms): answered long before the next poll
    m = Machine("m1", tmp_path, redis.url, policy(inflight, "fleet_max_requests = 4"))
    m.start_agent(poll_ms=10000)
    try:
        time.sleep(0.5)   # (its first pass done: the next poll is 10 s away)
        r = m.shim.run(py_script(tmp_path, ONE_GET) + [inflight.url + "hold/10"], timeout=60)
        out = r.last_json()
        assert out["status"] == 200 and out["s"] < 5, (out, m.log())
        assert m.share(inflight.dest) == 4, m.shim.entry(inflight.dest)
    finally:
        m.kill_agent()
        m.shim.cleanup()


def test_check_notes_that_a_fleet_limit_is_kept_by_the_agents(tmp_path):
    pol = tmp_path / "p.conf"
    pol.write_text("[host \"shop.example\"]\nfleet_max_requests = 40\nfleet_rate = 50/s\n")
    r = subprocess.run([str(BUILD / "shimctl"), "check", str(pol)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stdout.splitlines() if "note:" in line]
    assert notes == [f"{pol}:2: note: fleet_max_requests is a limit for every machine together: each machine "
                     "keeps to the share its netshim-agent (with --redis, reading this policy) leases; a machine "
                     "that runs none keeps the whole limit to itself"], r.stdout


@pytest.mark.agent
def test_a_lapsed_rate_share_holds_requests_without_spinning_and_an_agent_back_lets_them_go(tmp_path, redis,
                                                                                            inflight):
    # fleet_rate's share lapsed (the agent killed): a program's request
    # waits for a token, looking again every 100 ms, not in a busy loop
    # (its CPU over 3 s well under a second), and nothing reaches the
    # server; an agent again: it goes
    m = Machine("m1", tmp_path, redis.url, policy(inflight, "fleet_rate = 10/s"))
    m.start_agent()
    try:
        r = m.shim.run(py_script(tmp_path, ONE_GET) + [inflight.url + "hold/0"], timeout=60).last_json()
        assert r["status"] == 200, r
        assert m.share(inflight.dest, "rate_per_s") == 10.0
        m.kill_agent(signal.SIGKILL)
        time.sleep((3 * POLL_MS + 1000) / 1000 + 0.3)   # the lease lapsed
        assert m.shim.entry(inflight.dest)["fleet_share"]["lease_left_ms"] == 0
        before = inflight.total
        p = spawn(m.shim, py_script(tmp_path, ONE_GET) + [inflight.url + "hold/0"])
        time.sleep(3)
        held = inflight.total - before
        m.start_agent()
        _, status, ru = os.wait4(p.pid, 0)
        out = json.loads(p.stdout.read().strip().splitlines()[-1])
        assert held == 0 and out["status"] == 200 and out["s"] >= 2, (held, out)
        assert ru.ru_utime + ru.ru_stime < 1.0, (ru.ru_utime, ru.ru_stime)
    finally:
        m.kill_agent()
        m.shim.cleanup()


def busy_three_then_migrating(machines, inflight, redis, secs):
    """Redis Cluster: 3 machines hammering fleet_max_requests = 12 (4
    each), then the slot of the fleet's keys migrating to another master:
    (machines, their clients, (source, target, slot, target's id))."""
    if hasattr(redis, "proc"):
        pytest.skip("a slot moves in the Redis Cluster")
    ms = machines(3, policy(inflight, "fleet_max_requests = 12"))
    going = busy(ms, inflight, 100, secs, 6)
    assert wait_shares(ms, inflight.dest, lambda sh: sh == [4, 4, 4], 5) is not None
    return ms, going, redis.migrating("netshim:{default}:seq")


def move_the_rest(redis, mig, per, pause):
    """The slot's keys still on the source moved, per a command (pause
    between), and the slot the target's on every master."""
    source, target, slot, tid = mig
    for _ in range(20):
        keys = redis.node_cli(source, "CLUSTER", "GETKEYSINSLOT", str(slot), str(per)).split()
        if not keys:
            break
        out = redis.node_cli(source, "MIGRATE", "127.0.0.1", str(target), "", "0", "5000", "REPLACE", "KEYS", *keys)
        assert out.strip() in ("OK", "NOKEY"), out
        time.sleep(pause)
    for m in redis.masters():
        redis.node_cli(m, "CLUSTER", "SETSLOT", str(slot), "NODE", tid)


def whole_again(ms, going, inflight, moved):
    """After the move: every agent said moved(its log), the shares sum to
    12 again, every request was answered, the server never above 12."""
    assert wait_for_true(lambda: all(moved(m.log()) for m in ms), 10), \
        "\n".join(f"--- {m.name}, not said:\n{m.log()}" for m in ms if not moved(m.log()))
    t = wait_shares(ms, inflight.dest, lambda sh: sum(sh) == 12, 10)
    res = wait_all(going)
    assert all(rc == 0 and json.loads(o.strip().splitlines()[-1])["nbad"] == 0 for rc, o, _ in res), res
    assert t is not None, [m.log() for m in ms]
    assert inflight.peak <= 12, inflight.peak


@pytest.mark.agent
def test_the_fleets_slot_moved_to_another_master_mid_run_is_followed_and_never_above_the_limit(machines, inflight,
                                                                                               redis):
    # Redis Cluster: the slot of the fleet's keys (the leases among them)
    # migrates to another master, a few keys at a time, while 3 machines
    # hammer fleet_max_requests = 12 (its keys answered with ASK and
    # TRYAGAIN while they move, MOVED after): the agents follow (a MOVED;
    # or, met by a second redirection inside one command, by looking for
    # the slots' masters again: routed again), the server never sees more
    # than 12, every request is answered, the shares whole again
    ms, going, mig = busy_three_then_migrating(machines, inflight, redis, 10)
    move_the_rest(redis, mig, 3, 0.1)
    whole_again(ms, going, inflight, lambda log: "a slot moved" in log or "redis cluster routed again" in log)


@pytest.mark.agent
def test_a_lease_that_meets_its_slot_half_moved_keeps_the_shares_and_asks_again_at_the_next_poll(
        machines, inflight, redis):
    # Redis Cluster: one of a lease's three keys moves to another master
    # and the rest stay (the slot half moved: every lease's script is
    # answered TRYAGAIN) for 1.5 s, 7 polls: the agents keep their shares
    # (4 each of fleet_max_requests = 12) and ask again at each poll,
    # saying so once; none takes the links for broken (the tree before
    # closed them all and looked for the slots' masters again, every
    # time); when the slot has moved whole, MOVED is followed and the
    # shares are leased again; the server never sees more than 12
    ms, going, mig = busy_three_then_migrating(machines, inflight, redis, 8)
    source, target, slot, _ = mig
    keys = redis.node_cli(source, "CLUSTER", "GETKEYSINSLOT", str(slot), "1000").split()
    one = [k for k in keys if ":leasem:" in k]
    assert one, keys
    out = redis.node_cli(source, "MIGRATE", "127.0.0.1", str(target), "", "0", "5000", "REPLACE", "KEYS", one[0])
    assert out.strip() == "OK", out
    held = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.5:
        held.append(shares_of(ms, inflight.dest))
        time.sleep(0.05)
    logs = [m.log() for m in ms]
    move_the_rest(redis, mig, 1000, 0)
    assert all("a fleet lease met its slot being moved" in x for x in logs), logs
    assert not any("looking for the slots' new masters" in x for x in logs), logs
    assert all(sh == [4, 4, 4] for sh in held), held
    # moved whole, the slot is followed by a MOVED, or (a master told of
    # the move before another: MOVED answered by MOVED, 1 run in ~10 here)
    # by reading the routes again, as in the test before
    whole_again(ms, going, inflight, lambda log: "a slot moved" in log or "redis cluster routed again" in log)


@pytest.mark.agent
def test_a_request_under_a_lapsed_share_fails_at_queue_timeout_naming_the_limit_in_force(tmp_path, redis, inflight):
    # the agent killed, its lease lapsed: this machine's share is 0, so a
    # request waits queue_timeout (1 s), fails at its start with
    # ECONNREFUSED, and the line names the limit in force, 0 (not the 4
    # places the fleet key spans here)
    from test_requests import ONE
    m = Machine("m1", tmp_path, redis.url, policy(inflight, "fleet_max_requests = 4").replace("60s", "1s"))
    m.start_agent()
    try:
        r = m.shim.run(py_script(tmp_path, ONE_GET) + [inflight.url + "hold/0"], timeout=60).last_json()
        assert r["status"] == 200 and m.share(inflight.dest) == 4, (r, m.log())
        m.kill_agent(signal.SIGKILL)
        time.sleep((3 * POLL_MS + 1000) / 1000 + 0.3)   # the lease lapsed
        before = inflight.total
        r = m.shim.run(py_script(tmp_path, ONE) + [inflight.port], timeout=60)
        out = r.last_json()
        assert out["sent"] is False and out["errno"] == "ECONNREFUSED" and out["s"] >= 0.9, out
        assert inflight.total == before
        assert "max_requests (0) reached" in r.err, r.err
    finally:
        m.kill_agent()
        m.shim.cleanup()


def lease_script():
    """The agent's lease script, as tools/agent/lease.c holds it."""
    import sys
    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    import leasebench
    return leasebench.script_text()


def test_the_lease_script_gives_a_lone_machine_the_whole_limit_however_often_it_asks_in_a_poll(redis):
    # one machine, fleet_max_requests = 4, the level counted once (a poll
    # of an hour): whatever its demand and however many calls between two
    # counts (a lease between polls, a first share asked at once), what no
    # one asks for is counted as it stands at each call, so its share
    # stays 4 (the script before kept what no one asked for from the last
    # count, moved by the change since the machine's previous call only:
    # a third call in a poll found 3)
    single_only(redis, "the script's calls on the single redis-server (the same script on the cluster)")
    sc = lease_script()
    keys = [f"netshim:{{t}}:{p}:0:shop:443" for p in ("lease", "leasem", "leasex")]
    got = []
    for demand, inuse in ((1, 0), (0, 1), (0, 0), (0, 0), (2, 2), (0, 0)):
        out = redis.cli("EVAL", sc, "3", *keys, "m1", "60000", "3600000", "0", "4", str(demand), str(inuse))
        got.append(int(out.split()[0]))
    assert got == [4] * 6, got


def test_the_lease_script_counts_the_level_again_when_a_machine_lets_go_of_its_share(redis):
    # two machines, fleet_max_requests = 8, both asking 8 (4 each), a poll
    # of 2 s; then m2's programs end (demand 0): its call counts the level
    # again (a quarter poll after the last count), so m1's next call, in
    # the same poll, has the whole 8. The script before kept the level (4)
    # until the poll's end: m1 had 4 for up to one more poll, and the
    # others reached their new shares up to 3 polls after a machine went
    # idle (the bar: 2)
    single_only(redis, "the script's calls on the single redis-server (the same script on the cluster)")
    sc = lease_script()
    keys = [f"netshim:{{t}}:{p}:0:shop:443" for p in ("lease", "leasem", "leasex")]

    def call(node, demand, inuse):
        out = redis.cli("EVAL", sc, "3", *keys, node, "60000", "2000", "0", "8", str(demand), str(inuse))
        return int(out.split()[0])

    got = []
    for node, demand, inuse in (("m1", 8, 0), ("m2", 8, 0), ("m1", 8, 4), ("m2", 8, 0), ("m1", 8, 4), ("m2", 8, 4)):
        time.sleep(0.6)   # (more than a quarter poll: each call may count the level again)
        got.append(call(node, demand, inuse))
    assert got[-2:] == [4, 4], got   # both busy: 4 each
    time.sleep(0.6)
    got.append(call("m2", 0, 0))
    got.append(call("m1", 8, 4))
    assert got[-2:] == [0, 8], got
