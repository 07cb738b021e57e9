"""A real Redis Cluster on loopback for the fleet's tests: 3 masters and 3
replicas made by `redis-cli --cluster create`, started once per test
session and emptied between tests. It answers the same calls as
test_fleet.Redis (url, port, cli, kill, start), so every fleet test runs
against it as against one Redis."""
import os
import random
import shutil
import signal
import socket
import subprocess
import time

SLOTS = 16384


def crc16(data):
    """Redis Cluster's key hash (CRC16-CCITT, XMODEM)."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key):
    s = key.find("{")
    if s >= 0:
        e = key.find("}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc16(key.encode()) % SLOTS


# Ports for a server the test starts later (redis-server, a listener named
# in a policy): below the kernel's ephemeral range (32768 and up here), so
# no connect's own port and no bind to port 0 (another test file's, run at
# once by another worker) can take one between its choice and its use.
SPARE_LOW, SPARE_HIGH = 10000, 32767


def spare_port(host="127.0.0.1", bus=False):
    """A free port of host outside the ephemeral range (bus: its cluster
    bus port, port + 10000, free and outside it too)."""
    high = SPARE_HIGH - 10000 if bus else SPARE_HIGH
    while True:
        p = random.randint(SPARE_LOW, high)
        try:
            for q in (p, p + 10000) if bus else (p,):
                with socket.socket() as b:
                    b.bind((host, q))
        except OSError:
            continue
        return p


def free_ports(n):
    """n ports whose cluster bus ports (port + 10000) are free too."""
    ports = []
    while len(ports) < n:
        p = spare_port(bus=True)
        if p not in ports:
            ports.append(p)
    return ports


class Cluster:
    # a master lost: the agents keep the fleet's holds this long while they
    # look for its replica (tools/agent/agentstate.h REROUTE_GRACE_MS)
    hold_grace_s = 5.0

    def __init__(self, tmp):
        self.tmp = tmp
        self.ports = free_ports(6)
        self.procs = {}
        for p in self.ports:
            os.makedirs(os.path.join(tmp, str(p)), exist_ok=True)
        self.start()
        out = subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
                              "--cluster-replicas", "1", "--cluster-yes"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        self.wait_ok()

    # the seed the agents are given: a master that does not serve the
    # default fleet's slot, so every agent must route by CLUSTER SLOTS
    @property
    def url(self):
        return f"redis://127.0.0.1:{self.seed_port()}"

    @property
    def port(self):
        """The master of the default fleet's keys (for raw writes)."""
        return self.master_of("netshim:{default}:seq")

    def start_node(self, p):
        d = os.path.join(self.tmp, str(p))
        self.procs[p] = subprocess.Popen(
            ["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000", "--save", "",
             "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self):
        for p in self.ports:
            if p not in self.procs:
                self.start_node(p)
        for p in self.ports:
            deadline = time.monotonic() + 10
            while self.node_cli(p, "PING").strip() != "PONG":
                assert time.monotonic() < deadline, f"redis-server {p} did not start"
                time.sleep(0.05)
        if hasattr(self, "_created"):
            self.wait_ok()
        self._created = True

    def kill_node(self, p):
        proc = self.procs.pop(p, None)
        if proc:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def kill(self):
        for p in list(self.procs):
            self.kill_node(p)

    def close(self):
        self.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def node_cli(self, port, *args):
        try:
            return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                                  timeout=10).stdout
        except subprocess.TimeoutExpired:
            return ""

    def slots(self):
        """[(start, end, master_port, [replica ports])] as a live node says."""
        for p in self.procs:
            out = subprocess.run(["redis-cli", "-p", str(p), "--json", "CLUSTER", "SLOTS"], capture_output=True,
                                 text=True, timeout=10).stdout
            if out.strip().startswith("["):
                import json
                return [(e[0], e[1], e[2][1], [r[1] for r in e[3:]]) for e in json.loads(out)]
        return []

    def migrating(self, key):
        """Begin moving key's slot from its master to another (IMPORTING on
        the target, MIGRATING on the source): (source, target, slot, the
        target's node id)."""
        source = self.master_of(key)
        target = next(m for m in self.masters() if m != source)
        slot = key_slot(key)
        sid = self.node_cli(source, "CLUSTER", "MYID").strip()
        tid = self.node_cli(target, "CLUSTER", "MYID").strip()
        assert self.node_cli(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", sid).strip() == "OK"
        assert self.node_cli(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", tid).strip() == "OK"
        return source, target, slot, tid

    def masters(self):
        return sorted({m for _, _, m, _ in self.slots()})

    def master_of(self, key):
        m = self.master_now(key)
        if m is None:
            raise AssertionError(f"no master serves slot {key_slot(key)}")
        return m

    def master_now(self, key):
        """The master serving key's slot, or None (in a failover, for a
        moment, none does: what one waits for must not fail on it)."""
        slot = key_slot(key)
        for a, b, m, _ in self.slots():
            if a <= slot <= b:
                return m
        return None

    def replica_of(self, master):
        for _, _, m, reps in self.slots():
            if m == master and reps:
                return reps[0]
        return None

    def seed_port(self):
        owner = self.master_of("netshim:{default}:seq")
        return next(m for m in self.masters() if m != owner)

    def wait_ok(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [p for p in self.procs]
            slots = self.slots()
            if live and all("cluster_state:ok" in self.node_cli(p, "CLUSTER", "INFO") for p in live) \
                    and len({m for _, _, m, _ in slots}) == 3 and all(reps for _, _, _, reps in slots) \
                    and all("master_link_status:up" in self.node_cli(r, "INFO", "replication")
                            for _, _, _, reps in slots for r in reps):
                return
            time.sleep(0.1)
        raise AssertionError("the cluster did not come back: " + self.node_cli(self.ports[0], "CLUSTER", "NODES"))

    def cli(self, *args):
        """A command as redis-cli -c sends it (following redirections);
        FLUSHDB and FLUSHALL go to every master."""
        if args and args[0].upper() in ("FLUSHDB", "FLUSHALL"):
            return "".join(self.node_cli(m, *args) for m in self.masters())
        seed = next(iter(self.procs))
        return subprocess.run(["redis-cli", "-c", "-p", str(seed), *args], capture_output=True, text=True,
                              timeout=10).stdout

    def reset(self):
        """Between tests: every node running, the cluster whole, no keys."""
        self.start()
        self.wait_ok()
        for m in self.masters():
            self.node_cli(m, "FLUSHALL")
            self.node_cli(m, "SCRIPT", "FLUSH")
