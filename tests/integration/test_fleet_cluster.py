"""The fleet on a real Redis Cluster (issue 24 item 3): 3 masters and 3
replicas on loopback. Every test of test_fleet.py runs against it too (its
`redis` fixture); these are what only a cluster has: --shards spreading the
keys over the masters, a master killed and its replica promoted, a slot
moved from one master to another (ASK while it moves, MOVED after).

Negative control: NETSHIM_FLEET_NO_AGENT=1 starts no agents and every test
here fails (they are marked `agent`)."""
import json
import re
import threading
import time

import pytest

from test_fleet import Node, fleet, trip, trip_until_held, wait_for  # noqa: F401


@pytest.fixture
def redis(redis_cluster):
    """The store of test_fleet's `fleet` fixture here: the cluster alone."""
    redis_cluster.reset()
    return redis_cluster


@pytest.fixture
def cluster(redis):
    return redis


@pytest.fixture
def nodes(fleet):
    return fleet


def commands(cluster, port):
    info = cluster.node_cli(port, "INFO", "stats")
    return int(re.search(r"total_commands_processed:(\d+)", info).group(1))


@pytest.mark.agent
def test_shards_spread_the_fleets_keys_and_commands_over_every_master(nodes, cluster):
    n1, n2, n3 = nodes(extra=("--shards", "3"))
    # 30 destinations forced open by an operator on n1: every machine holds them
    dests = [f"198.51.100.{i}:443" for i in range(1, 31)]
    for d in dests:
        assert n1.shim.ctl("open", d).returncode == 0
    assert wait_for(lambda: all(n3.state(d) == "forced_open" for d in dests), 10) is not None, n3.log()
    masters = cluster.masters()
    keys = {m: int(cluster.node_cli(m, "DBSIZE").strip() or 0) for m in masters}
    assert all(k >= 5 for k in keys.values()), f"keys per master: {keys}"
    # steady state: the agents' polls, per master, within 2x of each other
    before = {m: commands(cluster, m) for m in masters}
    time.sleep(3)
    per = {m: commands(cluster, m) - before[m] for m in masters}
    print(f"commands per master in 3 s: {per}; keys: {keys}")
    assert min(per.values()) > 0 and max(per.values()) <= 2 * min(per.values()), f"commands per master: {per}"
    assert all(d in n2.shim.status() for d in dests)


@pytest.mark.shim
@pytest.mark.agent
def test_a_master_killed_its_replica_promoted_the_agents_follow_and_no_hold_is_lost_or_doubled(
        nodes, cluster, server):
    n1, n2, n3 = nodes()
    srv, later = server("reset"), server("reset")
    trip_until_held(n3, srv, n1, n2)
    owner = cluster.master_of("netshim:{default}:seq")
    replica = cluster.replica_of(owner)
    assert replica, cluster.slots()
    states = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            states.append(n3.state(srv.dest))
            time.sleep(0.02)

    w = threading.Thread(target=watch)
    w.start()
    t0 = time.monotonic()
    cluster.kill_node(owner)
    try:
        # the replica takes over (cluster-node-timeout 1 s), and the agents with it
        assert wait_for(lambda: cluster.master_now("netshim:{default}:seq") == replica, 15) is not None
        followed = wait_for(lambda: all("routed again" in n.log() for n in (n1, n2, n3)), 10)
        assert followed is not None, n3.log()
        took = time.monotonic() - t0
        print(f"failover: the agents routed again {took:.2f} s after the master was killed")
        assert took < 5, f"the agents followed the new master {took:.1f} s after the kill"
        # a trip after the failover reaches the fleet through the new master
        trip(n1, later)
        trip(n2, later)
        assert wait_for(lambda: n3.state(later.dest) == "fleet_open", 5) is not None, n3.log()
    finally:
        stop.set()
        w.join()
    assert set(states) == {"fleet_open"}, f"n3 left fleet_open during the failover: {sorted(set(states))}"
    ev = [json.loads(line) for line in n3.shim.ctl("events", "--json", srv.dest).stdout.splitlines()]
    opened = [e for e in ev if e["event"] == "fleet_open"]
    assert len(opened) == 1, f"fleet_open {len(opened)} times: {ev}"
    assert sorted(n3.shim.entry(srv.dest)["fleet_open_nodes"]) == ["n1", "n2"], "each vote counted once"


@pytest.mark.shim
@pytest.mark.agent
def test_a_slot_moved_to_another_master_is_followed_ask_while_it_moves_moved_after(
        tmp_path, nodes, cluster, server):
    n1, n2 = nodes(n=2)
    srv, later = server("reset"), server("reset")
    trip(n1, srv)
    trip(n2, srv)
    source, target, slot, tid = cluster.migrating("netshim:{default}:seq")
    # the destination's votes move first: the source answers ASK for them
    moved = [f"netshim:{{default}}:votes:{srv.dest}"]
    out = cluster.node_cli(source, "MIGRATE", "127.0.0.1", str(target), "", "0", "5000", "KEYS", *moved)
    assert out.strip() == "OK", out
    # a machine joining now reads the votes where they went (ASKING first)
    n3 = Node("n3", tmp_path, cluster.url)
    n3.start_agent()
    try:
        assert wait_for(lambda: n3.state(srv.dest) == "fleet_open", 5) is not None, n3.log()
        # the rest of the slot moves, and the slot is the target's
        keys = cluster.node_cli(source, "CLUSTER", "GETKEYSINSLOT", str(slot), "1000").split()
        if keys:
            out = cluster.node_cli(source, "MIGRATE", "127.0.0.1", str(target), "", "0", "5000", "KEYS", *keys)
            assert out.strip() == "OK", out
        for m in cluster.masters():
            cluster.node_cli(m, "CLUSTER", "SETSLOT", str(slot), "NODE", tid)
        assert wait_for(lambda: "a slot moved" in n3.log(), 5) is not None, n3.log()
        trip(n1, later)
        trip(n2, later)
        assert wait_for(lambda: n3.state(later.dest) == "fleet_open", 5) is not None, n3.log()
        assert n3.state(srv.dest) == "fleet_open"
    finally:
        n3.stop_agent()
        n3.shim.cleanup()
