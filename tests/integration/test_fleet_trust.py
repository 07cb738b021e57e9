"""Signed votes and commands (issue 24 item 15): with --fleet-key-file every
agent signs what it writes and believes only what a fleet key signed, so a
writer of Redis without the key can neither hold a destination open nor
force one open, nor make a real reset be ignored afterwards. Runs against
one Redis and against the cluster (the `redis` fixture)."""
import os
import subprocess
import time

import pytest

from conftest import BUILD, ROOT
from test_fleet import NO_AGENT, POLL_MS, SPREAD_S, Node, redis, trip, wait_for  # noqa: F401
from test_fleet_hardening import forge, redis_now_ms

KEY = "k3y-0f-the-fleet-" + "x" * 16


def key_file(tmp_path, text=KEY + "\n", mode=0o600, name="fleet.key"):
    p = tmp_path / name
    p.write_text(text)
    os.chmod(p, mode)
    return str(p)


@pytest.fixture
def signed(tmp_path, redis):
    made = []

    def make(n=3, quorum=2, key=None):
        kf = key or key_file(tmp_path)
        for i in range(n):
            node = Node(f"n{i + 1}", tmp_path, redis.url)
            made.append(node)
            node.start_agent("--fleet-key-file", kf, quorum=quorum)
        return made

    yield make
    for node in made:
        node.stop_agent()
        node.shim.cleanup()


def forge_command(redis, dest, op, node, seq):
    """An operator command written straight into Redis, unsigned."""
    p = "netshim:{default}:"
    redis.cli("HSET", f"{p}cmd:{dest}", "seq", str(seq), "op", op, "node", node, "at", str(redis_now_ms(redis)))
    redis.cli("SET", f"{p}seq", str(seq))
    redis.cli("ZADD", f"{p}changes", str(seq), dest)


@pytest.mark.shim
@pytest.mark.agent
def test_signed_votes_hold_and_forged_votes_and_commands_are_ignored(signed, redis, server):
    n1, n2, n3 = signed()
    # the fleet works as before: two signed votes hold it open on the third
    srv = server("reset")
    trip(n1, srv)
    trip(n2, srv)
    assert wait_for(lambda: n3.state(srv.dest) == "fleet_open", 5) is not None, n3.log()
    assert "fleet key" in n3.log()
    # two invented nodes vote a destination open, without a signature and
    # with a signature made up
    forge(redis, "10.7.7.7:80", "evil1", "failure_threshold", 1000)
    p = "netshim:{default}:"
    redis.cli("HSET", f"{p}votes:10.7.7.7:80", "evil2", f"{redis_now_ms(redis) + 600000} x {'0' * 32}")
    redis.cli("ZADD", f"{p}changes", "1001", "10.7.7.7:80")
    redis.cli("SET", f"{p}seq", "1001")
    # a real node's signed vote copied onto another destination
    real = redis.cli("HGET", f"{p}votes:{srv.dest}", "n1").strip()
    assert len(real.split()) == 3, real
    redis.cli("HSET", f"{p}votes:10.7.7.8:80", "n1", real, "n2", redis.cli("HGET", f"{p}votes:{srv.dest}", "n2").strip())
    redis.cli("ZADD", f"{p}changes", "1002", "10.7.7.8:80")
    # a forced open with no signature, numbered past anything real
    forge_command(redis, "10.7.7.9:80", "forced_open", "evil1", 999999)
    time.sleep(4 * POLL_MS / 1000 + 0.5)
    for n in (n1, n2, n3):
        for d in ("10.7.7.7:80", "10.7.7.8:80", "10.7.7.9:80"):
            assert n.state(d) in (None, "closed"), (n.name, d, n.state(d), n.log())
    assert wait_for(lambda: "not signed with a fleet key" in n3.log(), 65) is not None, n3.log()
    # a real forced open and reset still reach every machine
    dest = "198.51.100.9:443"
    assert n1.shim.ctl("open", dest).returncode == 0
    assert wait_for(lambda: n2.state(dest) == "forced_open" and n3.state(dest) == "forced_open", 5) is not None
    opened = redis.cli("HGETALL", f"{p}cmd:{dest}").split()
    forge_command(redis, dest, "forced_open", "evil1", 2000000)
    assert n2.shim.ctl("reset", dest).returncode == 0
    assert wait_for(lambda: n1.state(dest) == "closed" and n3.state(dest) == "closed", SPREAD_S + 1) is not None, \
        n3.log()
    # the real forced open, signed, written back with a later number: a replay
    fields = dict(zip(opened[::2], opened[1::2]))
    assert fields["op"] == "forced_open" and len(fields["sig"]) == 32, fields
    fields["seq"] = "3000000"
    redis.cli("HSET", f"{p}cmd:{dest}", *[x for kv in fields.items() for x in kv])
    redis.cli("SET", f"{p}seq", "3000000")
    redis.cli("ZADD", f"{p}changes", "3000000", dest)
    time.sleep(4 * POLL_MS / 1000 + 0.5)
    assert (n1.state(dest), n2.state(dest), n3.state(dest)) == ("closed", "closed", "closed"), n3.log()


@pytest.mark.agent
def test_a_key_file_readable_by_others_short_or_empty_is_refused_at_start(tmp_path):
    node = Node("n1", tmp_path, "redis://127.0.0.1:1")
    try:
        cases = [
            (key_file(tmp_path, mode=0o644, name="open.key"), "open.key: readable by others"),
            (key_file(tmp_path, KEY + "\nshort\n", name="short.key"), "short.key:2: a key of 5 bytes; at least 16"),
            (key_file(tmp_path, "\n\n", name="empty.key"), "empty.key: no key"),
        ]
        for kf, why in cases:
            agent = str(BUILD / "netshim-agent") if not NO_AGENT else "/bin/true"
            p = subprocess.run([agent, "--redis", node.redis_url, "--table", node.shim.table, "--fleet-key-file", kf],
                               capture_output=True, text=True, timeout=10)
            assert p.returncode == 2 and why in p.stderr, (p.returncode, p.stderr)
    finally:
        node.shim.cleanup()


@pytest.mark.shim
@pytest.mark.agent
def test_a_key_rotates_in_second_then_first_and_a_vote_signed_with_an_unknown_key_counts_for_nothing(
        tmp_path, signed, redis, server):
    old = key_file(tmp_path, KEY + "\n")
    n1, n2 = signed(n=2, quorum=2, key=old)
    # n3 is half-way through a rotation: it signs with the new key and still
    # believes the old one; n1 and n2 know only the old key
    both = tmp_path / "both.key"
    both.write_text("the-new-key-of-the-fleet-0123456789\n" + KEY + "\n")
    os.chmod(both, 0o600)
    n3 = Node("n3", tmp_path, redis.url)
    n3.start_agent("--fleet-key-file", str(both), quorum=2)
    try:
        srv, other = server("reset"), server("reset")
        trip(n1, srv)
        trip(n3, srv)
        time.sleep(4 * POLL_MS / 1000 + 0.3)
        assert n2.state(srv.dest) is None, "a vote signed with a key n2 does not hold counts for nothing there"
        trip(n1, other)
        trip(n2, other)
        assert wait_for(lambda: n3.state(other.dest) == "fleet_open", 5) is not None, n3.log()
        assert sorted(n3.shim.entry(other.dest)["fleet_open_nodes"]) == ["n1", "n2"]
    finally:
        n3.stop_agent()
        n3.shim.cleanup()


def man_acl(cluster):
    """The ACL SETUSER the man page's TRUST section gives, words as Redis takes them."""
    text = (ROOT / "man" / "netshim-agent.8").read_text()
    block = "ACL SETUSER" + text.split("ACL SETUSER", 1)[1].split(".fi", 1)[0]
    words = block.replace("\\-", "-").split()[2:]
    assert words[:2] == ["netshim-agent", "on"] and ">PASSWORD" in words, words
    words = [">s3cret-acl" if w == ">PASSWORD" else w for w in words]
    if cluster:   # as the man page says for a cluster
        words += ["+cluster|slots", "+asking"]
    return words


@pytest.mark.shim
@pytest.mark.agent
def test_the_acl_of_the_man_page_is_all_an_agent_needs(tmp_path, redis, server):
    cluster = hasattr(redis, "procs")
    acl = man_acl(cluster)
    for port in (list(redis.procs) if cluster else [redis.port]):
        out = subprocess.run(["redis-cli", "-p", str(port), "ACL", "SETUSER", *acl], capture_output=True, text=True,
                             timeout=10).stdout
        assert out.strip() == "OK", out
    url = redis.url.replace("redis://", "redis://netshim-agent:s3cret-acl@")
    nodes = []
    try:
        for i in range(3):
            n = Node(f"n{i + 1}", tmp_path, url)
            nodes.append(n)
            n.start_agent()
        n1, n2, n3 = nodes
        srv = server("reset")
        trip(n1, srv)
        trip(n2, srv)
        assert wait_for(lambda: n3.state(srv.dest) == "fleet_open", 5) is not None, n3.log()
        dest = "198.51.100.10:443"
        assert n1.shim.ctl("open", dest).returncode == 0
        assert wait_for(lambda: n2.state(dest) == "forced_open", SPREAD_S + 1) is not None, n2.log()
        for n in nodes:
            assert "NOPERM" not in n.log() and "hint channel unavailable" not in n.log(), n.log()
    finally:
        for n in nodes:
            n.stop_agent()
            n.shim.cleanup()
