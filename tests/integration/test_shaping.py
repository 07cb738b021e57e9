"""Shaping traffic machine-wide: max_connections with queue_timeout.

The server here counts the connections it holds at once: from accept until
it answers (each holds `hold` seconds first). It stops counting one just
before it sends the answer, so before the client can read it, close and
give its place back; a connection let in over the cap overlaps the others'
holds and is counted.
Real programs (python requests, curl, node, asyncio and hand-written poll,
select and epoll loops) run under the shim in several processes at once."""
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import (BUILD, NEGATIVE, PY, accept_forever, base_env, each_stopped, open_breaker_by_failing,
                      py_script, read_head, shimrun_spawn as spawn, stop_listener, wait_all)


class CountingServer:
    """HTTP/1.1 on loopback: one thread per connection; each request is
    answered after `hold` seconds with Connection: close."""

    def __init__(self, hold=0.05):
        self.hold = hold
        self.failing = False       # close every connection at once, unanswered
        self.first_ok = None       # when the first answer after failing went out
        self.samples = []          # (time, connections held), every 20 ms
        self.lock = threading.Lock()
        self.cur = self.peak = self.total = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.dest = f"127.0.0.1:{self.port}"
        self.url = f"http://127.0.0.1:{self.port}/"
        self.stopping = False
        accept_forever(self.sock, self._serve)
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self.stopping:
            with self.lock:
                self.samples.append((time.monotonic(), self.cur))
            time.sleep(0.02)

    def _serve(self, c):
        if self.failing:
            c.close()
            return
        with self.lock:
            self.cur += 1
            self.total += 1
            self.peak = max(self.peak, self.cur)
        counted = True
        try:
            c.settimeout(30)
            head, rest = read_head(c)
            if head is not None or rest:
                time.sleep(self.hold)
                with self.lock:
                    self.cur -= 1
                    if self.first_ok is None:
                        self.first_ok = time.monotonic()
                counted = False
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        except OSError:
            pass
        finally:
            if counted:
                with self.lock:
                    self.cur -= 1
            c.close()

    def holding(self):
        with self.lock:
            return self.cur

    def stop(self):
        self.stopping = True
        stop_listener(self.sock)


@pytest.fixture
def counting():
    yield from each_stopped(CountingServer)


REQUESTS = """
import json, sys, requests
ok = 0
for _ in range(int(sys.argv[2])):
    ok += requests.get(sys.argv[1], timeout=60).status_code == 200
print(json.dumps({"ok": ok}))
"""


@pytest.mark.shim
def test_sixteen_processes_never_hold_more_than_max_connections(shim, counting, tmp_path):
    srv = counting(hold=0.05)
    shim.policy("[defaults]\nmax_connections = 4\nqueue_timeout = 30s\n")
    py = py_script(tmp_path, REQUESTS)
    procs = []
    for i in range(16):
        if i % 2:
            procs.append(spawn(shim, py + [srv.url, 10]))
        else:
            procs.append(spawn(shim, ["curl", "-s", "-w", "%{http_code}\\n", "--max-time", "60"]
                               + ["-o", "/dev/null", srv.url] * 10))
    results = wait_all(procs)
    ok = 0
    for i, (rc, o, e) in enumerate(results):
        assert rc == 0, (i, o, e)
        ok += json.loads(o.strip().splitlines()[-1])["ok"] if i % 2 else o.split().count("200")
    assert ok == 160
    assert srv.total == 160
    assert srv.peak == 4, f"the server held {srv.peak} connections at once"
    e = shim.entry(srv.dest)
    assert e["state"] == "closed" and e["failures"] == 0 and e["throttled"] == 0 and e["calls"] == 160, e
    assert e["inflight"] == 0, e
    assert e["waited_ms_p99"] is not None, e   # they did wait


HOLD = """
import json, socket, sys, time
s = socket.socket()
s.connect(("127.0.0.1", int(sys.argv[1])))
print(json.dumps({"connected": True}), flush=True)
time.sleep(float(sys.argv[2]))
"""


def hold_places(shim, tmp_path, srv, n, seconds):
    """n processes that each connect and hold the connection (no request)."""
    procs = [spawn(shim, py_script(tmp_path, HOLD) + [srv.port, seconds]) for _ in range(n)]
    for p in procs:
        line = p.stdout.readline()
        assert "connected" in line, (line, p.stderr.read() if p.poll() is not None else "")
    return procs


CONNECT = """
import errno, json, socket, sys, time
s = socket.socket()
if sys.argv[2] == "nonblocking":
    s.settimeout(10)
t0 = time.monotonic()
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
    e = 0
except OSError as x:
    e = x.errno
print(json.dumps({"errno": e, "ms": (time.monotonic() - t0) * 1000}))
"""


@pytest.mark.shim
@pytest.mark.parametrize("how", ["blocking", "nonblocking"])
@pytest.mark.parametrize("queue", ["queue_timeout = 0", "(unset: connect_timeout)"])
def test_the_excess_connect_waits_queue_timeout_then_is_refused_and_throttled(shim, counting, tmp_path, how, queue):
    """queue_timeout = 0 refuses at once; unset, a queued connect is a slow
    connect: it waits the destination's connect_timeout (here 3 s), then is
    refused, and the first throttling says so on the program's stderr."""
    srv = counting()
    shim.policy("[defaults]\nmax_connections = 2\nconnect_timeout = 3s\n" +
                (queue + "\n" if queue.startswith("queue_timeout") else ""))
    holders = hold_places(shim, tmp_path, srv, 2, 30)
    try:
        r = shim.run(py_script(tmp_path, CONNECT) + [srv.port, how])
        rep = r.last_json()
        assert rep["errno"] == 111, rep   # ECONNREFUSED
        if queue.startswith("queue_timeout"):
            assert rep["ms"] < 1500, rep   # at once (half the wait the other case must make)
        else:
            assert rep["ms"] >= 2995, rep
        assert "netshim: 127.0.0.1:%d: max_connections (2) reached" % srv.port in r.err, r.err
        e = shim.entry(srv.dest)
        assert e["throttled"] == 1 and e["failures"] == 0 and e["state"] == "closed", e
        assert e["calls"] == 2 and e["inflight"] == 2, e
    finally:
        for p in holders:
            p.kill()
            p.wait()


@pytest.mark.shim
@pytest.mark.parametrize("cap", ["2", "auto"])
def test_each_process_says_its_own_first_refusal_naming_the_limit_in_force(shim, counting, tmp_path, cap):
    """Before, the first refusal of a minute was said by the machine's first
    process only (a second program refused a second later said nothing),
    and under auto the line named max_connections_max, not the limit in
    force."""
    srv = counting()
    policy = "[defaults]\nqueue_timeout = 0\nconnect_timeout = 3s\n"
    policy += ("max_connections = 2\n" if cap == "2" else
               "max_connections = auto\nmax_connections_min = 2\nmax_connections_max = 8\n")
    shim.policy(policy)
    holders = hold_places(shim, tmp_path, srv, 2, 30)
    try:
        want = "max_connections (%s) reached" % ("2" if cap == "2" else "auto: 2 now")
        for _ in range(2):   # two processes, one after the other: each says it once
            r = shim.run(py_script(tmp_path, CONNECT) + [srv.port, "blocking"])
            assert r.last_json()["errno"] == 111
            said = [line for line in r.err.splitlines() if "reached" in line]
            assert len(said) == 1 and want in said[0], r.err
        assert shim.entry(srv.dest)["throttled"] == 2
    finally:
        for p in holders:
            p.kill()
            p.wait()


@pytest.mark.shim
def test_a_place_held_by_a_killed_process_is_given_back_at_the_next_connect(shim, counting, tmp_path):
    srv = counting()
    shim.policy("[defaults]\nmax_connections = 4\nqueue_timeout = 30s\n")
    holders = hold_places(shim, tmp_path, srv, 4, 60)
    assert shim.entry(srv.dest)["inflight"] == 4
    for p in holders:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # the places are still marked as theirs in the table; shimctl counts
    # only the living, and the next connect frees them
    assert shim.entry(srv.dest)["inflight"] == 0
    r = shim.run(py_script(tmp_path, CONNECT) + [srv.port, "blocking"])
    rep = r.last_json()
    assert rep["errno"] == 0 and rep["ms"] < 1000, rep


CHURN = """
import socket, sys, time
port = int(sys.argv[1])
while True:
    s = socket.socket()
    s.connect(("127.0.0.1", port))
    time.sleep(0.01)
    s.close()
"""


@pytest.mark.shim
def test_processes_killed_at_random_while_connecting_lose_no_place(shim, counting, tmp_path):
    import random

    srv = counting()
    shim.policy("[defaults]\nmax_connections = 6\nqueue_timeout = 30s\n")
    rnd = random.Random(7)
    script = py_script(tmp_path, CHURN)
    procs = [spawn(shim, script + [srv.port]) for _ in range(8)]
    end = time.monotonic() + 5
    kills = 0
    while time.monotonic() < end:
        time.sleep(rnd.uniform(0.05, 0.2))
        i = rnd.randrange(len(procs))
        procs[i].send_signal(signal.SIGKILL)
        procs[i].wait()
        kills += 1
        procs[i] = spawn(shim, script + [srv.port])
    for p in procs:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert kills > 15
    # two connections really open: the table says two
    holders = hold_places(shim, tmp_path, srv, 2, 30)
    try:
        e = shim.entry(srv.dest)
        assert e["inflight"] == 2, e
        # and the cap is whole: four more fit at once (any dead holder's
        # place is freed by the connect that finds the rest held)
        more = hold_places(shim, tmp_path, srv, 4, 30)
        assert shim.entry(srv.dest)["inflight"] == 6
        for p in more:
            p.kill()
            p.wait()
    finally:
        for p in holders:
            p.kill()
            p.wait()


LOOP = r"""
import errno, json, select, selectors, socket, sys, time
port, n, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
socks, state, got = [], {}, {}
for i in range(n):
    s = socket.socket()
    s.setblocking(False)
    r = s.connect_ex(("127.0.0.1", port))
    assert r == errno.EINPROGRESS, r
    socks.append(s)
    state[s.fileno()] = "connecting"
    got[s.fileno()] = b""
done = 0
if kind == "epoll-et":
    ep = select.epoll()
    for s in socks:
        ep.register(s.fileno(), select.EPOLLOUT | select.EPOLLIN | select.EPOLLET)
    byfd = {s.fileno(): s for s in socks}
    deadline = time.monotonic() + 60
    while done < n and time.monotonic() < deadline:
        for fd, ev in ep.poll(1):
            s = byfd[fd]
            if state[fd] == "connecting" and ev & select.EPOLLOUT:
                assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                s.send(req)
                state[fd] = "reading"
            if state[fd] == "reading":
                while True:
                    try:
                        d = s.recv(4096)
                    except BlockingIOError:
                        break
                    if not d:
                        state[fd] = "done"
                        done += 1
                        s.close()
                        break
                    got[fd] += d
else:
    sel = {"poll": selectors.PollSelector, "select": selectors.SelectSelector,
           "epoll": selectors.EpollSelector}[kind]()
    for s in socks:
        sel.register(s, selectors.EVENT_WRITE)
    deadline = time.monotonic() + 60
    while done < n and time.monotonic() < deadline:
        for key, ev in sel.select(1):
            s, fd = key.fileobj, key.fileobj.fileno()
            if state[fd] == "connecting":
                assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                s.send(req)
                state[fd] = "reading"
                sel.modify(s, selectors.EVENT_READ)
            else:
                d = s.recv(4096)
                got[fd] += d
                if not d:
                    state[fd] = "done"
                    done += 1
                    sel.unregister(s)
                    s.close()
ok = sum(v.startswith(b"HTTP/1.1 200") for v in got.values())
print(json.dumps({"done": done, "ok": ok}))
"""


@pytest.mark.shim
@pytest.mark.parametrize("kind", ["poll", "select", "epoll", "epoll-et"])
def test_event_loops_wait_their_turn_without_blocking(shim, counting, tmp_path, kind):
    srv = counting(hold=0.1)
    shim.policy("[defaults]\nmax_connections = 3\nqueue_timeout = 30s\n")
    r = shim.run(py_script(tmp_path, LOOP) + [srv.port, 20, kind], timeout=90)
    assert r.rc == 0, (r.out, r.err)
    assert r.last_json() == {"done": 20, "ok": 20}
    assert srv.peak == 3, srv.peak
    e = shim.entry(srv.dest)
    assert e["throttled"] == 0 and e["failures"] == 0 and e["inflight"] == 0, e
    # 20 answers of 0.1 s, three at a time: at least 7 rounds
    assert r.elapsed >= 0.6


# An event loop that keeps four connects queued under a cap of one: each
# that connects is closed 100 ms later and a new one opened (the kernel
# gives it the number just freed, the lowest). The loop lists its sockets
# to poll in number order, as many do, so the newest is looked at first.
FIFO = """
import json, select, socket, sys, time
port, total = int(sys.argv[1]), int(sys.argv[2])
pending, done, refused, held, seq = {}, [], [], None, 0

def start():
    global seq
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    pending[s.fileno()] = (seq, s)
    seq += 1

for _ in range(4):
    start()
while len(done) + len(refused) < total:
    p = select.poll()
    for fd in sorted(pending):
        p.register(fd, select.POLLOUT)
    for fd, ev in p.poll(20):
        i, s = pending.pop(fd)
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            refused.append(i)
            s.close()
            start()
        else:
            done.append(i)
            held = (s, time.monotonic())
    if held and time.monotonic() - held[1] >= 0.1:
        held[0].close()
        held = None
        start()
print(json.dumps({"done": done, "refused": refused}))
"""


@pytest.mark.shim
def test_a_place_goes_to_the_connect_that_queued_first(shim, counting, tmp_path):
    srv = counting()
    shim.policy("[defaults]\nmax_connections = 1\nqueue_timeout = 3s\n")
    r = shim.run(py_script(tmp_path, FIFO) + [srv.port, 16], timeout=90)
    assert r.rc == 0, (r.out, r.err)
    rep = r.last_json()
    # served in the order queued: none passed over until its queue_timeout
    assert rep == {"done": list(range(16)), "refused": []}, rep
    e = shim.entry(srv.dest)
    assert e["throttled"] == 0 and e["failures"] == 0, e


ASYNCIO = """
import asyncio, json, sys
async def one(port):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    data = await r.read()
    w.close()
    return data.startswith(b"HTTP/1.1 200")
async def main():
    port = int(sys.argv[1])
    res = await asyncio.gather(*(one(port) for _ in range(20)))
    print(json.dumps({"ok": sum(res)}))
asyncio.run(main())
"""

NODE = """
const http = require('http');
const port = +process.argv[2];
let ok = 0, done = 0;
for (let i = 0; i < 20; i++) {
  http.get({host: '127.0.0.1', port, path: '/', agent: false}, res => {
    res.resume();
    res.on('end', () => { ok += res.statusCode === 200; if (++done === 20) console.log(JSON.stringify({ok})); });
  }).on('error', e => { console.log(JSON.stringify({error: e.code})); process.exit(1); });
}
"""


@pytest.mark.shim
@pytest.mark.parametrize("prog", ["asyncio", "node"])
def test_asyncio_and_node_open_twenty_under_a_cap_of_three(shim, counting, tmp_path, prog):
    srv = counting(hold=0.1)
    shim.policy("[defaults]\nmax_connections = 3\nqueue_timeout = 30s\n")
    if prog == "node":
        p = tmp_path / "client.js"
        p.write_text(NODE)
        args = ["node", str(p), srv.port]
    else:
        args = py_script(tmp_path, ASYNCIO) + [srv.port]
    r = shim.run(args, timeout=90)
    assert r.rc == 0, (r.out, r.err)
    assert r.last_json() == {"ok": 20}
    assert srv.peak == 3, srv.peak
    assert shim.entry(srv.dest)["throttled"] == 0


@pytest.mark.shim
def test_a_queued_nonblocking_connect_past_its_queue_timeout_is_refused(shim, counting, tmp_path):
    srv = counting()
    shim.policy("[defaults]\nmax_connections = 1\nqueue_timeout = 500ms\n")
    holders = hold_places(shim, tmp_path, srv, 1, 30)
    try:
        r = shim.run(["curl", "-s", "-o", "/dev/null", "--max-time", "10", srv.url])
        assert r.rc == 7, (r.rc, r.err)   # curl: couldn't connect (refused)
        assert 450 <= r.elapsed * 1000 <= 450 + 1500, r.elapsed
        e = shim.entry(srv.dest)
        assert e["throttled"] == 1 and e["failures"] == 0 and e["state"] == "closed", e
    finally:
        for p in holders:
            p.kill()
            p.wait()


# ---- open periods that grow: open_backoff, open_duration_max, open_jitter

# Connects in a loop against a server that resets every request: a connect
# that reaches the server (the kernel's handshake succeeds) is a probe, or
# the failure that opened the breaker; while it is open the shim refuses at
# once. The times of those that reached it, apart, are the open periods.
PROBER = """
import json, socket, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
end = time.monotonic() + seconds
reached = []
while time.monotonic() < end:
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        reached.append(time.monotonic())
        s.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
        s.recv(100)
    except OSError:
        pass
    s.close()
    time.sleep(0.01)
print(json.dumps({"periods": [b - a for a, b in zip(reached, reached[1:])]}))
"""


@pytest.mark.shim
def test_failed_probes_in_a_row_open_for_longer_and_a_success_starts_over(shim, server, tmp_path):
    srv = server("reset")
    shim.policy("[defaults]\nconsecutive_failures = 1\nfailure_threshold = 0\nopen_duration = 1s\n"
                "open_backoff = 2\nopen_duration_max = 4s\n")
    script = py_script(tmp_path, PROBER)
    r = shim.run(script + [srv.port, 11.6], timeout=60)
    periods = r.last_json()["periods"]
    assert len(periods) == 4, periods
    for got, want in zip(periods, [1, 2, 4, 4]):
        assert want - 0.01 <= got <= want + 0.3, periods
    # a success (the probe answered) closes it; the next failure opens for 1 s again
    srv.heal()
    r = shim.run(script + [srv.port, 4.5], timeout=60)
    assert shim.entry(srv.dest)["state"] == "closed", shim.entry(srv.dest)
    srv.stop()
    srv2 = server("reset", port=srv.port)
    r = shim.run(script + [srv2.port, 1.6], timeout=60)
    periods = r.last_json()["periods"]
    assert len(periods) == 1 and 0.99 <= periods[0] <= 1.3, periods


@pytest.mark.shim
def test_open_jitter_spreads_the_open_periods(shim, server, tmp_path):
    srv = server("reset")
    shim.policy("[defaults]\nconsecutive_failures = 1\nfailure_threshold = 0\nopen_duration = 1s\n"
                "open_jitter = 20%\n")
    r = shim.run(py_script(tmp_path, PROBER) + [srv.port, 7.5], timeout=60)
    periods = r.last_json()["periods"]
    assert len(periods) >= 5, periods
    assert all(0.79 <= p <= 1.2 + 0.3 for p in periods), periods
    assert max(periods) - min(periods) > 0.05, periods   # spread, not one length


# ---- Retry-After: a 429 or 503 that says when to come back

# Requests in a loop, each on a new connection (requests.get): when the
# first answer came, when each refusal by the shim (a connect refused at
# once, nothing sent) and each answer arrived.
ASKER = """
import json, sys, time, requests
url, seconds = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + seconds
log = []
while time.monotonic() < end:
    t = time.monotonic()
    try:
        log.append((t, requests.get(url, timeout=10).status_code))
    except requests.exceptions.ConnectionError:
        log.append((t, "refused"))
    time.sleep(0.05)
print(json.dumps({"log": log}))
"""


def cooldown_of(log):
    """The first 429/503, and the first answer after it: the cooldown, s."""
    first = next(i for i, (_, s) in enumerate(log) if s in (429, 503))
    refused = [t for t, s in log[first + 1:] if s == "refused"]
    after = next(t for t, s in log[first + 1:] if s != "refused")
    return after - log[first][0], len(refused)


@pytest.mark.shim
def test_a_429_with_retry_after_holds_every_process_off_for_that_long(shim, http_server, tmp_path):
    port = http_server("429,ra=3,close;200,close")
    url = f"http://127.0.0.1:{port}/"
    shim.policy("[defaults]\nfailure_threshold = 0\n")
    asker = spawn(shim, py_script(tmp_path, ASKER) + [url, 4.5])
    time.sleep(1.2)
    # another process, during the cooldown: refused at once, nothing sent
    r = shim.run(["curl", "-s", "-o", "/dev/null", "--max-time", "10", url])
    assert r.rc == 7 and r.elapsed < 1.0, (r.rc, r.elapsed, r.err)
    e = shim.entry(f"127.0.0.1:{port}")
    assert e["state"] == "cooldown" and e["cooldown_until"] is not None, e
    out, err = asker.communicate(timeout=60)
    log = json.loads(out.strip().splitlines()[-1])["log"]
    held, refused = cooldown_of(log)
    assert 2.8 <= held <= 3.0 + 0.3, (held, log)
    assert refused >= 10, log
    assert log[-1][1] == 200, log
    evs = [json.loads(l) for l in shim.ctl("events", "--json").stdout.splitlines()]
    cd = [e for e in evs if e["event"] == "cooldown"]
    assert len(cd) == 1 and "Retry-After: 3 s asked" in cd[0]["detail"], evs
    assert shim.entry(f"127.0.0.1:{port}")["state"] == "closed"


@pytest.mark.shim
@pytest.mark.parametrize("script,policy,lo,hi", [
    ("503,radate=3,close;200,close", "", 1.8, 3.4),            # the HTTP-date form (whole seconds)
    ("429,ra=30,close;200,close", "retry_after_max = 1s\n", 0.9, 1.4),   # capped
    ("429,ra=99999999999,close;200,close", "retry_after_max = 1s\n", 0.9, 1.4),   # 11 digits: capped too
])
def test_retry_after_as_a_date_and_capped(shim, http_server, tmp_path, script, policy, lo, hi):
    port = http_server(script)
    shim.policy("[defaults]\nfailure_threshold = 0\n" + policy)
    r = shim.run(py_script(tmp_path, ASKER) + [f"http://127.0.0.1:{port}/", hi + 1.2], timeout=60)
    held, _ = cooldown_of(r.last_json()["log"])
    assert lo <= held <= hi, (held, r.last_json())


@pytest.mark.shim
def test_retry_after_off_ignores_it(shim, http_server, tmp_path):
    port = http_server("429,ra=30,close;200,close")
    shim.policy("[defaults]\nfailure_threshold = 0\nretry_after = off\n")
    r = shim.run(py_script(tmp_path, ASKER) + [f"http://127.0.0.1:{port}/", 0.5])
    log = r.last_json()["log"]
    assert log[0][1] == 429 and log[1][1] == 200, log
    e = shim.entry(f"127.0.0.1:{port}")
    assert e["state"] == "closed" and e["cooldown_until"] is None and e["last_status"] == 200, e


@pytest.mark.shim
@pytest.mark.parametrize("prog", ["curl", "wget"])
def test_retry_after_is_read_through_tls(shim, http_server, prog):
    port = http_server("429,ra=30,close;200,close", tls=True)
    shim.policy("[defaults]\nfailure_threshold = 0\n")
    url = f"https://127.0.0.1:{port}/"
    if prog == "curl":
        args = ["curl", "-sk", "-o", "/dev/null", url]
    else:
        args = ["wget", "-q", "--no-check-certificate", "-t", "1", "-O", "/dev/null", url]
    shim.run(args)   # the 429
    e = shim.entry(f"127.0.0.1:{port}")
    assert e["state"] == "cooldown" and e["last_status"] == 429, e
    r = shim.run(args)
    assert r.rc != 0 and r.elapsed < 2, (r.rc, r.elapsed)
    e = shim.entry(f"127.0.0.1:{port}")
    assert e["rejected"] == 1, e



# ---- slow_start: after the breaker closes, the cap ramps up

WANTS_TEN = """
import sys, threading, time, requests
url, seconds = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + seconds
def loop():
    while time.monotonic() < end:
        try:
            requests.get(url, timeout=30)
        except requests.exceptions.RequestException:
            time.sleep(0.05)
ts = [threading.Thread(target=loop) for _ in range(10)]
[t.start() for t in ts]
[t.join() for t in ts]
print("{}")
"""


@pytest.mark.shim
def test_after_the_breaker_closes_the_cap_ramps_over_slow_start(shim, counting, tmp_path):
    srv = counting(hold=0.2)
    shim.policy("[defaults]\nconsecutive_failures = 1\nfailure_threshold = 0\nopen_duration = 1s\n"
                "max_connections = 10\nqueue_timeout = 30s\nslow_start = 5s\n")
    open_breaker_by_failing(shim, srv)
    r = shim.run(py_script(tmp_path, WANTS_TEN) + [srv.url, 8.5], timeout=60)
    assert r.rc == 0, r.err
    t0 = srv.first_ok   # the probe's answer: the breaker closed then
    assert t0 is not None
    held = lambda a, b: max([n for t, n in srv.samples if t0 + a <= t < t0 + b] or [0])
    # the cap over time: 10 x (10 % + 90 % of the time gone), rounded up
    assert held(0, 0.4) <= 2, srv.samples
    assert 3 <= held(2.0, 2.4) <= 6, [s for s in srv.samples if s[0] >= t0]
    assert held(5.2, 7.0) == 10, [s for s in srv.samples if s[0] >= t0 + 5]


# ---- retry_budget: a program's own retry storm is cut to its budget

STORM = """
import errno, json, socket, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
end = time.monotonic() + seconds
n = refused = 0
while time.monotonic() < end:
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
    except ConnectionRefusedError:
        refused += 1
    s.close()
    n += 1
print(json.dumps({"tries": n, "refused": refused}))
"""


@pytest.mark.shim
def test_a_tight_retry_loop_is_held_to_its_budget_and_a_healthy_client_beside_it_is_not(
        shim, server, counting, tmp_path):
    bad = server("refuse")
    good = counting(hold=0)
    shim.policy("[defaults]\nfailure_threshold = 0\nretry_budget = 20%\nretry_budget_min = 1/s\n")
    healthy = spawn(shim, py_script(tmp_path, REQUESTS) + [good.url, 30])
    r = shim.run(py_script(tmp_path, STORM) + [bad.port, 2.0])
    rep = r.last_json()
    assert rep["tries"] == rep["refused"] > 200, rep
    e = shim.entry(bad.dest)
    # 2 retries banked, about one more a second, a fifth of one per call
    assert 2 <= e["calls"] <= 8 and e["failures"] == e["calls"], e
    assert e["retry_throttled"] == rep["tries"] - e["calls"], (e, rep)
    assert e["state"] == "closed", e
    out, err = healthy.communicate(timeout=60)
    assert json.loads(out.strip().splitlines()[-1])["ok"] == 30, (out, err)
    g = shim.entry(good.dest)
    assert g["retry_throttled"] == 0 and g["calls"] == 30 and g["failures"] == 0, g


FORKER = """
import json, os, socket, sys, time
s = socket.socket()
s.connect(("127.0.0.1", int(sys.argv[1])))
pid = os.fork()
if pid == 0:
    s.close()          # the child's copy: not the holder
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"forked": True}), flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.mark.shim
def test_a_forked_childs_close_leaves_its_parents_place_held(shim, counting, tmp_path):
    srv = counting()
    shim.policy("[defaults]\nmax_connections = 1\nqueue_timeout = 0\n")
    p = spawn(shim, py_script(tmp_path, FORKER) + [srv.port, 30])
    try:
        assert "forked" in p.stdout.readline()
        assert shim.entry(srv.dest)["inflight"] == 1
        r = shim.run(py_script(tmp_path, CONNECT) + [srv.port, "blocking"])
        assert r.last_json()["errno"] == 111, r.last_json()   # still held: throttled
    finally:
        p.kill()
        p.wait()
    r = shim.run(py_script(tmp_path, CONNECT) + [srv.port, "blocking"])
    assert r.last_json()["errno"] == 0   # its holder died: the place is free again


# ---- exec: what the kernel closes unseen gives its place back (issue 34 item 2)

EXECER = """
import json, os, socket, sys, time
s = socket.socket()                     # close-on-exec, as Python makes them
s.connect(("127.0.0.1", int(sys.argv[1])))
if sys.argv[2] == "inherit":
    s.set_inheritable(True)             # this one lives on in the new program
try:
    os.execv("/nonexistent/program", ["x"])   # a failed exec: the place is taken again
except OSError:
    pass
print(json.dumps({"failed_exec": True}), flush=True)
sys.stdin.readline()                    # the test looks at the table
if sys.argv[2] == "raw":                # the kernel's execve through syscall(), not libc's execve
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    argv = (ctypes.c_char_p * 3)(b"sleep", b"30", None)
    env = [k.encode() + b"=" + v.encode() for k, v in os.environ.items()]
    envp = (ctypes.c_char_p * (len(env) + 1))(*env, None)
    libc.syscall(59, b"/bin/sleep", argv, envp)
os.execv("/bin/sleep", ["sleep", "30"])
"""


@pytest.mark.shim
@pytest.mark.parametrize("how", ["cloexec", "inherit", "raw"])
def test_a_place_held_by_a_close_on_exec_socket_is_given_back_at_exec(shim, counting, tmp_path, how):
    srv = counting()
    shim.policy("[defaults]\nmax_connections = 1\nqueue_timeout = 0\n")
    cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--"] + py_script(tmp_path, EXECER) + \
        [str(srv.port), how]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=base_env(shim.table, shim.policy_path))
    try:
        assert "failed_exec" in p.stdout.readline(), p.stderr.read() if p.poll() is not None else ""
        assert shim.entry(srv.dest)["inflight"] == 1   # held again after the exec that failed
        p.stdin.write("\n")
        p.stdin.flush()
        time.sleep(0.5)                  # sleep(1) runs in its place, same pid, same start time
        assert p.poll() is None
        r = shim.run(py_script(tmp_path, CONNECT) + [srv.port, "blocking"])
        if how in ("cloexec", "raw"):
            assert r.last_json()["errno"] == 0, r.last_json()     # the place came back at the exec
            assert shim.entry(srv.dest)["throttled"] == 0
        else:
            assert r.last_json()["errno"] == 111, r.last_json()   # the connection lives on: still held
    finally:
        p.kill()
        p.wait()


# ---- a queued non-blocking connect moves on whatever call asks (issue 34 item 3)

ASKS = r"""
import errno, json, socket, sys, time
port, how = int(sys.argv[1]), sys.argv[2]
s = socket.socket()
s.setblocking(False)
t0 = time.monotonic()
assert s.connect_ex(("127.0.0.1", port)) == errno.EINPROGRESS
err = 0
if how == "blocking-send":
    s.setblocking(True)          # O_NONBLOCK cleared: the send waits for the connect
    try:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    except OSError as e:
        err = e.errno
else:
    while time.monotonic() - t0 < 60:
        if how == "so_error":
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                break
            try:
                s.getpeername()
                break
            except OSError:
                pass
        else:                    # send: EAGAIN / ENOTCONN until it is connected
            try:
                s.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                break
            except BlockingIOError:
                pass
            except OSError as e:
                if e.errno != errno.ENOTCONN:
                    err = e.errno
                    break
        time.sleep(0.001)        # no poll, select or epoll: the shim's waits are never entered
    if not err and how == "so_error":
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
ms = (time.monotonic() - t0) * 1000
answer = b""
if not err:
    s.setblocking(True)
    s.settimeout(10)
    answer = s.recv(12)
print(json.dumps({"errno": err, "ms": ms, "answer": answer.decode()}))
"""


@pytest.mark.shim
@pytest.mark.parametrize("how", ["so_error", "send", "blocking-send"])
def test_a_queued_connect_moves_on_whatever_call_asks(shim, counting, tmp_path, how):
    """The only place is held for 1.5 s by another process; a non-blocking
    connect queued behind it is asked about with SO_ERROR and getpeername,
    or with send, in a loop that never polls, or its socket is made
    blocking and sent on: it connects once the place frees, and the
    request is answered. (It stayed 'not connected, no error' for ever, and
    the blocking send hung until the kernel gave up, 134 s.)"""
    srv = counting()
    shim.policy("[defaults]\nmax_connections = 1\nqueue_timeout = 20s\n")
    holder = hold_places(shim, tmp_path, srv, 1, 1.5)[0]
    try:
        r = shim.run(py_script(tmp_path, ASKS) + [srv.port, how], timeout=60)
        rep = r.last_json()
        assert rep["errno"] == 0 and rep["answer"] == "HTTP/1.1 200", rep
        assert 1000 <= rep["ms"] < 15000, rep   # it waited for the place, not for the queue's end
    finally:
        holder.kill()
        holder.wait()
    e = shim.entry(srv.dest)
    assert e["throttled"] == 0 and e["failures"] == 0, e


@pytest.mark.shim
@pytest.mark.parametrize("how", ["so_error", "send"])
def test_a_queued_connect_asked_without_a_wait_is_refused_at_queue_timeout(shim, counting, tmp_path, how):
    srv = counting()
    shim.policy("[defaults]\nmax_connections = 1\nqueue_timeout = 1s\n")
    holder = hold_places(shim, tmp_path, srv, 1, 30)[0]
    try:
        r = shim.run(py_script(tmp_path, ASKS) + [srv.port, how], timeout=60)
        rep = r.last_json()
        assert rep["errno"] == 111 and rep["ms"] >= 995, rep   # ECONNREFUSED, at queue_timeout
        assert shim.entry(srv.dest)["throttled"] == 1
    finally:
        holder.kill()
        holder.wait()


# ---- a cooldown holds requests on open connections too, and is not also a failure (issue 34 item 12)

SESSION = """
import json, sys, time, requests
s = requests.Session()
log = []
for _ in range(int(sys.argv[2])):
    t = time.monotonic()
    log.append((t, s.get(sys.argv[1], timeout=30).status_code, time.monotonic()))
print(json.dumps({"log": log}))
"""


@pytest.mark.shim
def test_a_cooldown_holds_requests_on_an_open_keepalive_connection(shim, http_server, tmp_path):
    """A requests.Session gets a 429 with Retry-After: 2 on its keep-alive
    connection: its next request on that connection waits for the cooldown's
    end (it went on at full pace), and the 429 whose Retry-After was honoured
    is a cooldown, not also a breaker failure (consecutive_failures = 1
    would have opened the breaker)."""
    port = http_server("200;429,ra=2;200")
    shim.policy("[defaults]\nconsecutive_failures = 1\n")
    r = shim.run(py_script(tmp_path, SESSION) + [f"http://127.0.0.1:{port}/", 4], timeout=60)
    log = r.last_json()["log"]
    assert [x[1] for x in log] == [200, 429, 200, 200], log
    # the request after the 429 was held until the cooldown ended
    assert log[2][2] - log[1][2] >= 1.9, log
    e = shim.entry(f"127.0.0.1:{port}")
    assert e["calls"] == 1 and e["exchanges"] == 4, e   # one connection, kept
    assert e["failures"] == 0 and e["state"] == "closed", e
    assert e["rejected"] == 0, e


@pytest.mark.shim
def test_curl_on_one_connection_waits_out_the_cooldown_without_blocking(shim, http_server, tmp_path):
    port = http_server("429,ra=2;200")
    shim.policy("[defaults]\nconsecutive_failures = 1\n")
    url = f"http://127.0.0.1:{port}/"
    r = shim.run(["curl", "-s", "-w", "%{http_code}\\n"] + ["-o", "/dev/null", url] * 3, timeout=60)
    assert r.out.split() == ["429", "200", "200"], (r.out, r.err)
    assert r.elapsed >= 1.9, r.elapsed
    e = shim.entry(f"127.0.0.1:{port}")
    assert e["calls"] == 1 and e["failures"] == 0 and e["state"] == "closed", e


@pytest.mark.shim
def test_a_503_without_retry_after_is_still_a_failure(shim, http_server, tmp_path):
    port = http_server("503")
    shim.policy("[defaults]\nconsecutive_failures = 2\n")
    r = shim.run(py_script(tmp_path, SESSION) + [f"http://127.0.0.1:{port}/", 2], timeout=60)
    assert [x[1] for x in r.last_json()["log"]] == [503, 503]
    e = shim.entry(f"127.0.0.1:{port}")
    assert e["failures"] == 2 and e["state"] == "open", e
