"""A share quorum (issue 24 item 5): agents heartbeat and report the
destinations their machine calls; --quorum 10% holds a destination open
when 10 % of the live machines that called it lately vote. Three real
agents; the other machines are simulated by the test writing their
heartbeats and calls into Redis as their agents would."""
import socket
import threading
import time

import pytest

from test_fleet import NO_AGENT, POLL_MS, SPREAD_S, fleet, redis, trip, wait_for  # noqa: F401


class Simulated:
    """Machines that only heartbeat (and, for callers, have called dest)."""

    def __init__(self, redis_port):
        self.sock = socket.create_connection(("127.0.0.1", redis_port))
        self.alive = set()
        self.stop = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def cmd(self, *args):
        """One command whose reply is one line (ZADD's integer)."""
        out = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args)
        self.sock.sendall(out)
        buf = b""
        while not buf.endswith(b"\r\n"):
            buf += self.sock.recv(4096)
        return buf

    @staticmethod
    def now_ms():
        return int(time.time() * 1000)   # Redis's clock: the same machine's

    def called(self, nodes, dest):
        now = str(self.now_ms())
        with self.lock:
            for n in nodes:
                self.cmd("ZADD", f"netshim:{{default}}:callers:{dest}", now, n)

    def run(self):
        while not self.stop:
            with self.lock:
                now = str(self.now_ms())
                for n in list(self.alive):
                    self.cmd("ZADD", "netshim:{default}:members", now, n)
            time.sleep(POLL_MS / 1000 / 2)


@pytest.mark.shim
@pytest.mark.agent
def test_a_share_quorum_counts_the_live_machines_that_called_the_destination(fleet, redis, server):
    n1, n2, n3 = fleet(n=3, extra=("--quorum", "10%"))
    srv = server("reset")
    sim = Simulated(redis.port)
    callers = [f"s{i}" for i in range(17)]           # with n1, n2, n3: 20 machines called it
    idle = [f"i{i}" for i in range(30)]              # 30 more alive that never called it
    sim.alive.update(callers + idle)
    sim.thread.start()
    try:
        sim.called(callers, srv.dest)
        sim.called(["n3"], srv.dest)                 # n3 called it too (without failing)
        time.sleep(3 * POLL_MS / 1000)
        trip(n1, srv)
        time.sleep(4 * POLL_MS / 1000)
        # 1 vote of 20 callers: 10 % is 2 (had the 30 idle machines counted, 5)
        assert n3.state(srv.dest) is None, n3.log()
        trip(n2, srv)
        took = wait_for(lambda: n3.state(srv.dest) == "fleet_open", 5)
        assert took is not None and took <= SPREAD_S + 0.5, (took, n3.log())
        assert "quorum 2: 10% of 20 live callers" in n3.log(), n3.log()
        # ten callers fall silent: after three intervals they leave the count
        assert n1.shim.ctl("reset", srv.dest).returncode == 0
        assert wait_for(lambda: n3.state(srv.dest) in (None, "closed"), 5) is not None, n3.log()
        with sim.lock:
            sim.alive.difference_update(callers[:10])
        time.sleep(4 * POLL_MS / 1000)
        trip(n1, srv)                                # 1 vote of 10 live callers: 10 % is 1
        took = wait_for(lambda: n3.state(srv.dest) == "fleet_open", 5)
        assert took is not None, n3.log()
        assert "quorum 1: 10% of 10 live callers" in n3.log(), n3.log()
    finally:
        sim.stop = True
