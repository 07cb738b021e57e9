"""The agent against a Redis it cannot trust to behave (issue 24, items
11-14): every reply bounded in time and size, hints that cannot drive the
poll rate, and a store that went back under a live connection."""
import select
import signal
import subprocess
import sys
import time
import pathlib

import pytest

from conftest import BUILD, PY, Shim
from test_fleet import (NO_AGENT, POLL_MS, SPREAD_S, Node, fleet, redis, trip, wait_for)  # noqa: F401

BADREDIS = pathlib.Path(__file__).with_name("badredis.py")


@pytest.fixture
def bad_redis():
    procs = []

    def start(mode):
        p = subprocess.Popen([PY, str(BADREDIS), mode], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        port = int(p.stdout.readline().split()[1])
        return p, port
    yield start
    for p in procs:
        p.kill()
        p.wait()


def line_within(proc, seconds):
    """The fake Redis's next line, or "" when none came in time."""
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    return proc.stdout.readline().strip() if ready else ""


def agent_on(tmp_path, port):
    """An agent (no hint channel) on the misbehaving Redis at port."""
    node = Node("n1", tmp_path, f"redis://127.0.0.1:{port}")
    node.start_agent("--no-hint", poll_ms=200)
    return node


def rss_mb(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0


@pytest.mark.agent
def test_a_trickled_reply_is_cut_at_the_timeout_and_sigterm_still_stops_the_agent(tmp_path, bad_redis):
    proc, port = bad_redis("trickle")
    node = agent_on(tmp_path, port)
    try:
        assert line_within(proc, 5) == "POLL"
        assert wait_for(lambda: "no whole reply within 1000 ms" in node.log(), 4) is not None, node.log()
        # wedged again in the next connection's poll: SIGTERM ends it at once
        assert line_within(proc, 5) == "POLL"
        time.sleep(0.3)
        t0 = time.monotonic()
        node.agent.send_signal(signal.SIGTERM)
        rc = node.agent.wait(timeout=5)
        took = time.monotonic() - t0
        node.agent = None
        assert rc == 0 and took < 1.0, (rc, took, node.log())
    finally:
        if node.agent:
            node.agent.kill()
        node.shim.cleanup()


@pytest.mark.agent
def test_a_reply_claiming_a_billion_elements_is_a_protocol_error_not_gigabytes(tmp_path, bad_redis):
    proc, port = bad_redis("huge")
    node = agent_on(tmp_path, port)
    try:
        assert line_within(proc, 5) == "POLL"
        peak = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:
            peak = max(peak, rss_mb(node.agent.pid))
            time.sleep(0.05)
        assert "a reply larger than" in node.log() and "protocol error" in node.log(), node.log()
        assert peak < 100, f"the agent grew to {peak:.0f} MB"
        assert node.agent.poll() is None, "the agent died"
    finally:
        node.stop_agent()
        node.shim.cleanup()


def publish(redis, channel, message, times, every_s):
    for _ in range(times):
        redis.cli("PUBLISH", channel, message)
        time.sleep(every_s)


@pytest.mark.agent
def test_false_hints_wake_at_most_one_poll_per_interval(fleet, redis):
    (n1,) = fleet(n=1, quorum=1, poll_ms=500)
    polls0 = n1.status_doc()["agent"]["polls"]
    t0 = time.monotonic()
    publish(redis, "netshim:{default}:hint", "999999999", 60, 0.05)   # ~4 s of a hint every 50 ms
    polls = n1.status_doc()["agent"]["polls"] - polls0
    took = time.monotonic() - t0
    regular = took / 0.5
    assert polls <= 2 * regular + 3, f"{polls} polls in {took:.1f} s with a 500 ms interval"


@pytest.mark.shim
@pytest.mark.agent
def test_after_flushdb_under_live_connections_new_votes_still_reach_the_fleet(fleet, server, redis):
    n1, n2 = fleet(n=2, quorum=1)
    first = server("reset")
    trip(n1, first)
    assert wait_for(lambda: n2.state(first.dest) == "fleet_open", 5) is not None, n2.log()
    redis.cli("FLUSHDB")
    # the store went back: the agents read it whole, and n1 publishes its vote again
    assert wait_for(lambda: "redis went back" in n2.log(), SPREAD_S + 1) is not None, n2.log()
    second = server("reset")
    trip(n1, second)
    took = wait_for(lambda: n2.state(second.dest) == "fleet_open", 5)
    assert took is not None and took <= SPREAD_S, (took, n2.log())
    assert n2.state(first.dest) == "fleet_open", "n1's first vote, published again, still holds"


def redis_now_ms(redis):
    sec, usec = redis.cli("TIME").split()
    return int(sec) * 1000 + int(usec) // 1000


def forge(redis, dest, node, rule, seq):
    """A vote written straight into Redis, as anyone with access could."""
    p = "netshim:{default}:"
    redis.cli("HSET", f"{p}votes:{dest}", node, f"{redis_now_ms(redis) + 600000} {rule}")
    redis.cli("SET", f"{p}seq", str(seq))
    redis.cli("ZADD", f"{p}changes", str(seq), dest)


@pytest.mark.agent
def test_junk_written_into_redis_reaches_neither_the_log_nor_the_table(fleet, redis):
    (n1,) = fleet(n=1, quorum=1)
    forge(redis, "evil\nnetshim-agent: forged line:80", "n9", "x", 1)
    forge(redis, "10.9.9.9:80", "n9", "failure_threshold\x1b[31mred", 2)
    assert wait_for(lambda: n1.state("10.9.9.9:80") == "fleet_open", 5) is not None, n1.log()
    assert wait_for(lambda: "were ignored" in n1.log(), 5) is not None, n1.log()
    log = n1.log()
    assert "forged line" not in log and "\x1b" not in log, log
    assert all(line.startswith("netshim-agent: ") for line in log.splitlines()), log
    assert set(n1.shim.status()) == {"10.9.9.9:80"}, n1.shim.status()


@pytest.mark.shim
@pytest.mark.agent
def test_the_fleet_cannot_fill_a_machines_table(tmp_path, redis, server):
    node = Node("n1", tmp_path, redis.url)
    node.shim.run(["curl", "-s", "-m", "1", "http://127.0.0.1:9/"], env={"NETSHIM_TABLE_SLOTS": "64"})
    node.start_agent(quorum=1)
    try:
        for i in range(100):
            forge(redis, f"10.8.{i // 200}.{i % 200 + 1}:80", "evil", "failure_threshold", i + 1)
        assert wait_for(lambda: "the table is" in node.log(), 10) is not None, node.log()
        doc = node.status_doc()
        assert doc["capacity"] == 64 and doc["used"] <= 48, (doc["capacity"], doc["used"])
        srv = server("http")
        r = node.shim.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", srv.url])
        assert r.out == "200" and node.shim.entry(srv.dest)["calls"] == 1, "this machine's own destination is counted"
    finally:
        node.stop_agent()
        node.shim.cleanup()
