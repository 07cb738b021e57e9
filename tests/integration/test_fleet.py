"""The fleet: three tables stand for three machines, one netshim-agent each,
sharing breaker state through a real redis-server on loopback.

Negative control: NETSHIM_FLEET_NO_AGENT=1 starts no agents; every test
marked `agent` must then fail (tests/negative_control.sh checks it). Tests
also marked `shim` fail with the shim disabled, like every other."""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from clients import PY_SOCKET
from conftest import BUILD, NEGATIVE, Shim, py_script
from rediscluster import spare_port

NO_AGENT = os.environ.get("NETSHIM_FLEET_NO_AGENT") == "1"
# the negative control runs a program that does nothing where the agent would run
AGENT = "/bin/true" if NO_AGENT else str(BUILD / "netshim-agent")
POLL_MS = 200
# an operator's command or a quorum reaches every node within two poll
# intervals; the rest is room for a loaded CI machine
SPREAD_S = 2 * POLL_MS / 1000 + 0.4

# (the servers here reset or answer: a read_timeout is only a backstop,
# long enough for a reset from a server starved on a loaded machine: 500 ms
# was met beside four busy loops and three test files at once)
TRIP = """
[defaults]
connect_timeout = 500ms
read_timeout = 3s
failure_threshold = 1
window = 30s
open_duration = {open}
"""


def free_port():
    return spare_port()


class Redis:
    """A redis-server on loopback that the test can kill and start again."""

    hold_grace_s = 0.0   # lost: the agents release the fleet's holds at once

    def __init__(self, tmp, password=None):
        self.tmp = tmp
        self.port = free_port()
        self.password = password
        self.proc = None
        self.start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def start(self):
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(self.tmp)]
        if self.password:
            cmd += ["--requirepass", self.password]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64):
                        return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def kill(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cli(self, *args):
        cmd = ["redis-cli", "-p", str(self.port)] + (["-a", self.password, "--no-auth-warning"] if self.password else [])
        return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=10).stdout


# every fleet test runs against one redis-server and against a Redis
# Cluster (3 masters, 3 replicas) the same way; the negative controls run
# the test bodies once (against the cluster they are the same assertions)
# (NETSHIM_REDIS=redis or =cluster: one of them only, as the ASan run does)
BACKENDS = ["redis"] if NEGATIVE or NO_AGENT else \
    [b for b in ("redis", "cluster") if b in os.environ.get("NETSHIM_REDIS", "redis,cluster").split(",")]


@pytest.fixture
def redis_single(tmp_path):
    """One redis-server, for tests of the agent that are not about the fleet's store."""
    r = Redis(tmp_path)
    yield r
    r.kill()


@pytest.fixture(params=BACKENDS)
def redis(request, tmp_path):
    if request.param == "cluster":
        c = request.getfixturevalue("redis_cluster")
        c.reset()
        yield c
        return
    r = Redis(tmp_path)
    yield r
    r.kill()


class Node:
    """One machine: its own table and policy, and its agent."""

    def __init__(self, name, tmp, redis_url, open_duration="30s", extra_policy=""):
        self.name = name
        d = tmp / name
        d.mkdir()
        self.shim = Shim(d)
        self.shim.policy(TRIP.format(open=open_duration) + extra_policy)
        self.log_path = d / "agent.log"
        self.redis_url = redis_url
        self.agent = None

    def start_agent(self, *extra, quorum=2, poll_ms=POLL_MS, env=None):
        if NO_AGENT:
            return
        self.agent = subprocess.Popen(
            [str(BUILD / "netshim-agent"), "--redis", self.redis_url, "--node", self.name, "--table", self.shim.table,
             "--poll-ms", str(poll_ms), "--quorum", str(quorum), *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"), env=env)
        # it is serving once its table names it
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            p = self.shim.ctl("status", "--json")
            if p.returncode == 0 and json.loads(p.stdout)["agent"]:
                return
            time.sleep(0.02)
        raise AssertionError(f"agent {self.name} did not start: {self.log()}")

    def stop_agent(self):
        if self.agent:
            self.agent.send_signal(signal.SIGTERM)
            rc = self.agent.wait(timeout=10)
            self.agent = None
            return rc
        return None

    def log(self):
        return self.log_path.read_text() if self.log_path.exists() else ""

    def connect(self, srv):
        """One Python connect + request to srv under the shim: its report."""
        return self.shim.run(py_script(self.shim.tmp, PY_SOCKET) + [srv.host, srv.port], timeout=20).last_json()

    def state(self, dest):
        e = self.shim.entry(dest)
        return e["state"] if e else None

    def status_doc(self):
        p = self.shim.ctl("status", "--json")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)


@pytest.fixture
def fleet(tmp_path, redis):
    nodes = []

    def make(n=3, quorum=2, extra=(), open_duration="30s", poll_ms=POLL_MS, extra_policy=""):
        for i in range(n):
            node = Node(f"n{i + 1}", tmp_path, redis.url, open_duration, extra_policy)
            nodes.append(node)
        for node in nodes:
            node.start_agent(*extra, quorum=quorum, poll_ms=poll_ms)
        return nodes

    yield make
    for node in nodes:
        node.stop_agent()
        node.shim.cleanup()


def wait_for(pred, timeout):
    """Poll pred until true; the seconds it took, or None. Without agents
    (the negative control) nothing the fleet does can come, however long
    one waits: a second is enough to see the test fail."""
    if NO_AGENT:
        timeout = min(timeout, 1.0)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


def trip(node, srv):
    """One failure from node's program opens its breaker (threshold 1)."""
    res = node.connect(srv)
    assert res["errno"] == "ECONNRESET", res
    assert node.state(srv.dest) == "open"


def trip_until_held(held, srv, *voters):
    """Each voter trips srv; the fleet then holds it open on `held`."""
    for v in voters:
        trip(v, srv)
    assert wait_for(lambda: held.state(srv.dest) == "fleet_open", 5) is not None, held.log()


@pytest.mark.shim
@pytest.mark.agent
def test_below_quorum_leaves_others_closed_at_quorum_they_fail_fast(fleet, server):
    n1, n2, n3 = fleet()
    srv = server("reset")
    trip(n1, srv)
    time.sleep(3 * POLL_MS / 1000)
    assert n2.state(srv.dest) is None and n3.state(srv.dest) is None, "one vote is below quorum 2"
    trip(n2, srv)
    took = wait_for(lambda: n3.state(srv.dest) == "fleet_open", 5)
    assert took is not None, n3.log()
    assert took <= SPREAD_S, f"fleet_open after {took:.2f} s"
    e = n3.shim.entry(srv.dest)
    assert sorted(e["fleet_open_nodes"]) == ["n1", "n2"]
    accepts = srv.accepts()
    res = n3.connect(srv)
    assert res["errno"] == "ECONNREFUSED" and res["phase"] == "connect", res
    assert res["ms"] < 100, res
    assert srv.accepts() == accepts, "a fleet-open destination is not contacted"
    e = n3.shim.entry(srv.dest)
    assert (e["rejected"], e["calls"]) == (1, 0)
    text = n3.shim.ctl("status").stdout
    assert "fleet_open" in text and "n1,n2" in text.replace("n2,n1", "n1,n2")


@pytest.mark.shim
@pytest.mark.agent
def test_the_hint_channel_spreads_a_trip_long_before_the_next_poll(fleet, server):
    n1, n2, n3 = fleet(poll_ms=5000)
    srv = server("reset")
    trip(n1, srv)
    time.sleep(0.5)
    trip(n2, srv)
    took = wait_for(lambda: n3.state(srv.dest) == "fleet_open", 6)
    assert took is not None, n3.log()
    assert took < 1.0, f"fleet_open after {took:.2f} s with a 5 s poll interval"


@pytest.mark.shim
@pytest.mark.agent
def test_votes_expire_after_the_voters_open_duration(fleet, server):
    n1, n2, n3 = fleet(open_duration="2s")
    srv = server("reset")
    trip(n1, srv)
    trip(n2, srv)
    t_open = time.monotonic()
    assert wait_for(lambda: n3.state(srv.dest) == "fleet_open", 5) is not None, n3.log()
    # nobody renews (no traffic on n1 and n2): both votes lapse at 2 s
    assert wait_for(lambda: n3.state(srv.dest) == "closed", 6) is not None, n3.log()
    closed_after = time.monotonic() - t_open
    assert 1.5 <= closed_after <= 2.0 + SPREAD_S, f"closed {closed_after:.2f} s after the trips"
    res = n3.connect(srv)
    assert res["errno"] == "ECONNRESET", res
    assert "fleet hold released (0 nodes report it open" in n3.log() or \
        "fleet hold released (1 node reports it open" in n3.log(), n3.log()


@pytest.mark.shim
@pytest.mark.agent
def test_breakers_opened_under_manual_recovery_vote_until_reset_and_a_killed_node_loses_its_vote(fleet, server):
    # the scraper team's policy: open until an operator resets it
    n1, n2, n3 = fleet(open_duration="1s", extra_policy="recovery = manual\n")
    srv = server("reset")
    trip(n1, srv)
    trip(n2, srv)
    took = wait_for(lambda: n3.state(srv.dest) == "fleet_open", 5)
    assert took is not None, n1.log() + n3.log()
    assert took <= SPREAD_S, f"fleet_open after {took:.2f} s"
    # open_duration means nothing under manual recovery: the votes are
    # renewed on their lease, long past it
    time.sleep(3.0)
    assert n3.state(srv.dest) == "fleet_open", n3.log()
    assert sorted(n3.shim.entry(srv.dest)["fleet_open_nodes"]) == ["n1", "n2"]
    # an operator's reset anywhere clears it everywhere, votes and all
    assert n3.shim.ctl("reset", srv.dest).returncode == 0
    assert wait_for(lambda: [n.state(srv.dest) for n in (n1, n2, n3)] == ["closed"] * 3, 5) is not None, \
        n1.log() + n2.log()
    time.sleep(3 * POLL_MS / 1000)
    assert [n.state(srv.dest) for n in (n1, n2, n3)] == ["closed"] * 3, "the votes went with the reset"
    # again; then n1's agent is killed: its vote lapses after its lease
    trip(n1, srv)
    trip(n2, srv)
    assert wait_for(lambda: n3.state(srv.dest) == "fleet_open", 5) is not None, n3.log()
    n1.agent.kill()
    n1.agent.wait()
    n1.agent = None
    t0 = time.monotonic()
    took = wait_for(lambda: n3.state(srv.dest) == "closed", 8)
    assert took is not None, n3.log()
    lease = 3 * POLL_MS / 1000 + 1.0
    # (renewed when half its lease was gone: it had between a half and a whole lease left)
    assert lease / 2 - 0.1 <= time.monotonic() - t0 <= lease + SPREAD_S + 1.0, time.monotonic() - t0
    assert n1.state(srv.dest) == "open", "n1's own breaker stays open (manual): only its vote lapsed"


@pytest.mark.shim
@pytest.mark.agent
def test_a_retry_after_seen_on_one_machine_cools_every_machine_down(fleet, http_server):
    n1, n2, n3 = fleet(extra_policy="failure_status = none\n")
    port = http_server("429,ra=3,close;200,close")
    dest, url = f"127.0.0.1:{port}", f"http://127.0.0.1:{port}/"
    t0 = time.monotonic()
    r = n1.shim.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url])
    assert r.out == "429", (r.out, r.err)
    assert n1.state(dest) == "cooldown"
    took = wait_for(lambda: n2.state(dest) == "cooldown" and n3.state(dest) == "cooldown", 5)
    assert took is not None, n1.log() + n2.log()
    assert took <= SPREAD_S, f"the cooldown reached the others after {took:.2f} s"
    r = n2.shim.run(["curl", "-sS", "-o", "/dev/null", url])
    assert r.rc == 7 and r.elapsed < 1, (r.rc, r.err)
    ev = n3.shim.ctl("events", "--json", dest).stdout
    assert "Retry-After seen on node n1" in ev, ev
    # the server's 3 s, counted from its answer on n1, hold on n3 too
    assert wait_for(lambda: n3.state(dest) != "cooldown", 6) is not None
    assert 2.5 <= time.monotonic() - t0 <= 3.0 + SPREAD_S + 0.5, time.monotonic() - t0
    r = n3.shim.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url])
    assert r.out == "200", (r.out, r.err)


@pytest.mark.shim
@pytest.mark.agent
def test_operator_reset_on_any_node_closes_it_on_all(fleet, server):
    n1, n2, n3 = fleet()
    srv = server("reset")
    trip_until_held(n3, srv, n1, n2)
    assert n3.shim.ctl("reset", srv.dest).returncode == 0
    t0 = time.monotonic()
    took = wait_for(lambda: n1.state(srv.dest) == "closed" and n2.state(srv.dest) == "closed", 5)
    assert took is not None, n1.log() + n2.log()
    assert took <= SPREAD_S, f"reset reached the others after {took:.2f} s"
    time.sleep(3 * POLL_MS / 1000)
    assert [n.state(srv.dest) for n in (n1, n2, n3)] == ["closed"] * 3, "the votes went with the reset"
    assert time.monotonic() - t0 < 30
    assert "reset by an operator on node n3" in n1.log()


@pytest.mark.agent
def test_operator_forced_open_applies_everywhere_whatever_the_quorum(fleet):
    n1, n2, n3 = fleet(quorum=3)
    dest = "198.51.100.7:443"   # never contacted: the test only reads states
    assert n1.shim.ctl("open", dest).returncode == 0
    took = wait_for(lambda: n2.state(dest) == "forced_open" and n3.state(dest) == "forced_open", 5)
    assert took is not None, n2.log()
    assert took <= SPREAD_S, f"forced open reached the others after {took:.2f} s"
    assert n2.shim.ctl("reset", dest).returncode == 0
    assert wait_for(lambda: n1.state(dest) == "closed" and n3.state(dest) == "closed", SPREAD_S) is not None


@pytest.mark.shim
@pytest.mark.agent
def test_a_node_with_most_destinations_open_is_suspect_and_its_votes_are_withheld(fleet, server):
    n1, n2, n3 = fleet()
    bad = [server("reset") for _ in range(4)]
    good = server("http")
    assert n1.connect(good)["errno"] == "OK"
    for srv in bad:
        trip(n1, srv)
    # 4 of 5 open on n1: its network is the likelier fault
    assert wait_for(lambda: (n1.status_doc()["agent"] or {}).get("suspect"), 5), n1.log()
    assert "node n1 is suspect: 4 of 5 destinations open at once" in n1.log()
    assert "its votes are withheld" in n1.shim.ctl("status").stdout
    trip(n2, bad[0])
    time.sleep(4 * POLL_MS / 1000)
    assert n3.state(bad[0].dest) is None, "n1's vote must not count: only n2 reports it"
    assert "n1" not in (n2.shim.entry(bad[0].dest)["fleet_open_nodes"])
    # a third, healthy voter makes the quorum: the withheld vote was the only thing missing
    trip(n3, bad[0])
    assert wait_for(lambda: n1.shim.entry(bad[0].dest)["fleet_open_nodes"] != [], 5) is not None, n1.log()
    assert sorted(n1.shim.entry(bad[0].dest)["fleet_open_nodes"]) == ["n2", "n3"]


@pytest.mark.shim
@pytest.mark.agent
def test_redis_down_leaves_programs_alone_and_trips_made_meanwhile_reach_the_fleet(fleet, server, redis):
    n1, n2, n3 = fleet()
    srv, later = server("reset"), server("reset")
    trip_until_held(n3, srv, n1, n2)
    redis.kill()
    # the hold is released: n3's programs reach the destination again
    assert wait_for(lambda: n3.state(srv.dest) == "closed", 5 + redis.hold_grace_s) is not None, n3.log()
    assert n3.status_doc()["agent"]["redis_connected"] is False
    res = n3.connect(srv)
    assert res["errno"] == "ECONNRESET", res
    # local breakers work as without the agent: n3's own trip fails fast
    assert n3.state(srv.dest) == "open"
    t0 = time.monotonic()
    assert n3.connect(srv)["errno"] == "ECONNREFUSED"
    assert time.monotonic() - t0 < 5
    # trips while Redis is away
    trip(n1, later)
    trip(n2, later)
    time.sleep(1.0)
    assert n3.state(later.dest) is None
    redis.start()
    took = wait_for(lambda: n3.state(later.dest) == "fleet_open", 10)
    assert took is not None, n3.log()
    assert "lost" in n3.log() and "connected again" in n3.log()
    assert n3.agent.poll() is None, "the agent retries forever"


@pytest.mark.agent
def test_bad_url_refused_auth_and_unreachable_redis_exit_2_at_start(tmp_path):
    secured = Redis(tmp_path, password="s3cret")
    table = f"nsfleet.{os.getpid()}.auth"
    try:
        def run(url):
            return subprocess.run([AGENT, "--redis", url, "--table", table],
                                  capture_output=True, text=True, timeout=10)

        r = run("http://127.0.0.1:1/")
        assert r.returncode == 2 and "not a redis:// URL" in r.stderr, r.stderr
        r = run("redis://127.0.0.1:99999")
        assert r.returncode == 2 and "bad port" in r.stderr, r.stderr
        r = run(f"redis://127.0.0.1:{secured.port}")
        assert r.returncode == 2 and "NOAUTH" in r.stderr, r.stderr
        r = run(f"redis://:wrong@127.0.0.1:{secured.port}")
        assert r.returncode == 2 and ("WRONGPASS" in r.stderr or "invalid password" in r.stderr), r.stderr
        r = run(f"redis://127.0.0.1:{free_port()}")
        assert r.returncode == 2 and "Connection refused" in r.stderr, r.stderr
        t0 = time.monotonic()
        agent = subprocess.Popen([AGENT, "--redis", f"redis://:s3cret@127.0.0.1:{secured.port}",
                                  "--table", table], stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert agent.poll() is None
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=5) == 0
        assert time.monotonic() - t0 < 3
        assert "stopped" in agent.stderr.read()
    finally:
        secured.kill()
        try:
            os.unlink(f"/dev/shm/{table}")
        except FileNotFoundError:
            pass


HOOK = """#!/bin/sh
line=$(cat)
printf '%s|%s|%s|%s|%s\\n' "$NETSHIM_EVENT" "$NETSHIM_DESTINATION" "$NETSHIM_RULE" "$NETSHIM_NODE" "$line" >> {out}
case "$NETSHIM_EVENT" in
  reset) exit 3 ;;
  forced_open) sleep 30 ;;
esac
"""


def hook_lines(path):
    if not path.exists():
        return []
    return [l.split("|", 4) for l in path.read_text().splitlines()]


@pytest.mark.shim
@pytest.mark.agent
def test_on_event_runs_once_per_event_with_the_event_on_stdin(fleet, server, tmp_path):
    out = tmp_path / "hooks.out"
    hook = tmp_path / "hook.sh"
    hook.write_text(HOOK.format(out=out))
    hook.chmod(0o755)
    n1, n2, n3 = fleet(extra=("--on-event", str(hook), "--hook-timeout-ms", "500"))
    srv = server("reset")
    trip(n1, srv)
    trip(n2, srv)
    # each agent runs its hooks on its own: n3 may hold the destination
    # (from n2's vote) before n2's agent has run n2's own "opened" hook
    assert wait_for(lambda: any(l[0] == "fleet_open" and l[3] == "n3" for l in hook_lines(out)) and
                    sorted(l[3] for l in hook_lines(out) if l[0] == "opened") == ["n1", "n2"], 10), n3.log()
    opened = [l for l in hook_lines(out) if l[0] == "opened"]
    assert sorted(l[3] for l in opened) == ["n1", "n2"]
    ev = json.loads(opened[0][4])
    assert ev["event"] == "opened" and ev["destination"] == srv.dest and ev["rule"] == "failure_threshold"
    assert opened[0][1] == srv.dest and opened[0][2] == "failure_threshold"
    assert ev["node"] == opened[0][3]
    # a failing hook is logged, the agent goes on; a hanging one is killed
    assert n1.shim.ctl("reset", srv.dest).returncode == 0
    assert wait_for(lambda: "exited with status 3" in n1.log(), 5), n1.log()
    assert n1.shim.ctl("open", "192.0.2.1:80").returncode == 0
    assert wait_for(lambda: "still running after 500 ms: killed" in n1.log(), 5), n1.log()
    assert n1.agent.poll() is None
    # events while n3's agent is away get their hook when it is back; none twice
    n3.stop_agent()
    trip(n3, srv)
    before = len(hook_lines(out))
    n3.start_agent("--on-event", str(hook), "--hook-timeout-ms", "500")
    assert wait_for(lambda: any(l[0] == "opened" and l[3] == "n3" for l in hook_lines(out)), 5), n3.log()
    time.sleep(1.0)
    seqs = [(l[3], json.loads(l[4])["seq"]) for l in hook_lines(out)]
    assert len(seqs) == len(set(seqs)), f"an event got two runs: {seqs}"
    assert len(hook_lines(out)) > before


def held_on_n3(fleet, server):
    """Quorum 1: n1's trip holds the destination open on n3."""
    n1, n2, n3 = fleet(quorum=1)
    srv = server("reset")
    trip_until_held(n3, srv, n1)
    return n3, srv


@pytest.mark.shim
@pytest.mark.agent
def test_sigterm_exits_cleanly_and_releases_the_holds(fleet, server):
    n3, srv = held_on_n3(fleet, server)
    t0 = time.monotonic()
    assert n3.stop_agent() == 0
    assert time.monotonic() - t0 < 2
    # nobody renews the hold now: it goes at once, local breakers alone
    assert n3.state(srv.dest) == "closed"
    assert n3.log().rstrip().endswith("netshim-agent: stopped")
    assert "fleet hold released (agent stopped)" in n3.log()
    assert n3.status_doc()["agent"] is None


@pytest.mark.shim
@pytest.mark.agent
def test_a_killed_agents_holds_lapse_by_themselves(fleet, server):
    n3, srv = held_on_n3(fleet, server)
    n3.agent.kill()
    n3.agent.wait()
    n3.agent = None
    t0 = time.monotonic()
    assert n3.status_doc()["agent"] is None, "a dead agent is not shown as serving"
    # nobody renews the lease (three poll intervals and a second): it lapses
    took = wait_for(lambda: n3.state(srv.dest) == "closed", 5)
    assert took is not None
    assert time.monotonic() - t0 <= 3 * POLL_MS / 1000 + 1.0 + 0.3
