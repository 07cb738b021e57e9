"""Limits that adapt (issue 38, docs/design.md): max_connections = auto
(AIMD over the shared slot) and throttle = adaptive (client-side throttling
over every process). The servers keep their own stamps: what each request
got, and when. The clients are python requests processes under shimrun (a
new connection each request), several at once."""
import json
import random
import statistics
import socket
import subprocess
import threading
import time

import pytest

from conftest import BUILD, accept_forever, base_env, each_stopped, py_script, read_head, stop_listener


class Server:
    """HTTP/1.1 on loopback, one thread per connection, Connection: close.
    capacity: requests served at once (each `hold` s); one beyond gets 429
    at once. reject: the share answered 503 at once, whatever the load."""

    def __init__(self, capacity=0, hold=0.05, reject=0.0):
        self.capacity, self.hold, self.reject = capacity, hold, reject
        self.rng = random.Random(7)
        self.lock = threading.Lock()
        self.busy = self.peak = 0
        self.log = []   # (time.monotonic(), status)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.dest = f"127.0.0.1:{self.port}"
        self.url = f"http://127.0.0.1:{self.port}/"
        accept_forever(self.sock, self._serve)

    def _serve(self, c):
        try:
            c.settimeout(30)
            if read_head(c)[0] is None:
                return
            with self.lock:
                if self.reject:
                    status = 503 if self.rng.random() < self.reject else 200
                elif self.busy < self.capacity:
                    self.busy += 1
                    self.peak = max(self.peak, self.busy)
                    status = 200
                else:
                    status = 429
            if status == 200 and not self.reject:
                time.sleep(self.hold)
                with self.lock:
                    self.busy -= 1
            with self.lock:
                self.log.append((time.monotonic(), status))
            reason = {200: b"OK", 429: b"Too Many Requests", 503: b"Service Unavailable"}[status]
            c.sendall(b"HTTP/1.1 %d %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok" % (status, reason))
        except OSError:
            pass
        finally:
            c.close()

    def between(self, t0, t1):
        with self.lock:
            return [s for t, s in self.log if t0 <= t < t1]

    def stop(self):
        stop_listener(self.sock)


@pytest.fixture
def servers():
    yield from each_stopped(Server)


# requests in a loop (a new connection each) until the stop file appears:
# what each got, as one JSON line
LOOP = """
import json, os, sys, time, requests
url, stop, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
got = {}
while not os.path.exists(stop):
    try:
        k = str(requests.get(url, timeout=60).status_code)
    except requests.exceptions.ConnectionError:
        k = "refused"
    got[k] = got.get(k, 0) + 1
    time.sleep(pause)
print(json.dumps(got))
"""


def start_loops(shim, tmp_path, url, n, pause, stop):
    script = py_script(tmp_path, LOOP)
    cmd = [str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--"]
    env = base_env(shim.table, shim.policy_path)
    return [subprocess.Popen(cmd + script + [url, str(stop), str(pause)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env) for _ in range(n)]


def finish(procs, stop):
    stop.write_text("")
    out = []
    for p in procs:
        o, e = p.communicate(timeout=90)
        assert p.returncode == 0, (o, e)
        out.append(json.loads(o.strip().splitlines()[-1]))
    return out


@pytest.mark.shim
def test_max_connections_auto_finds_the_servers_capacity_and_follows_it(shim, servers, tmp_path):
    # a server that serves 4 at once (50 ms each) and answers 429 beyond;
    # 8 processes loop as fast as they can. No breaker (failure_threshold =
    # 0): the limit alone keeps them off the 429s
    srv = servers(capacity=4, hold=0.05)
    shim.policy("[defaults]\nmax_connections = auto\nqueue_timeout = 30s\nfailure_threshold = 0\n")
    stop = tmp_path / "stop"
    t0 = time.monotonic()
    procs = start_loops(shim, tmp_path, srv.url, 8, 0, stop)
    try:
        time.sleep(17)
        # the limit saws (a 429 takes one off, a busy second adds one): it
        # is read every half second over the last 8 s. It reaches the
        # capacity, and most of the time it is near it
        limits = []
        for _ in range(16):
            time.sleep(0.5)
            limits.append(shim.entry(srv.dest)["limit"])
        t1 = time.monotonic()
        last = srv.between(t1 - 8, t1)
        limit = statistics.median(limits)
        served, refused = last.count(200), last.count(429)
        print(f"last 8 s: {served / 8:.1f} served a second, {refused} of {len(last)} got 429, limit {limits}")
        assert served / 8 >= 40, f"{served / 8:.0f} a second served in the last 8 s"
        assert refused <= 0.15 * len(last), f"{refused} of {len(last)} got 429 in the last 8 s"
        assert max(limits) >= 4 and 3 <= limit <= 5, f"limit {limits}"
        # the capacity doubles: the limit follows within 30 s
        with srv.lock:
            srv.capacity = 8
        followed = None
        for _ in range(30):
            time.sleep(1)
            if shim.entry(srv.dest)["limit"] >= 7:
                followed = time.monotonic() - t1
                break
        assert followed is not None, f"limit {shim.entry(srv.dest)['limit']} 30 s after the capacity doubled"
        print(f"the limit reached 7 {followed:.1f} s after the capacity doubled")
    finally:
        got = finish(procs, stop)
    assert all(g.get("200", 0) > 0 for g in got), got
    e = shim.entry(srv.dest)
    assert e["throttled"] == 0 and e["state"] == "closed", e


@pytest.mark.shim
def test_max_connections_auto_is_bounded_by_its_min_and_max(shim, servers, tmp_path):
    # no 429 at all: the limit grows while connections are in flight at half
    # of it, up to max_connections_max; the server never holds more
    srv = servers(capacity=100, hold=0.05)
    shim.policy("[defaults]\nmax_connections = auto\nmax_connections_min = 2\nmax_connections_max = 3\n"
                "adaptive_interval = 200ms\nqueue_timeout = 30s\n")
    stop = tmp_path / "stop"
    procs = start_loops(shim, tmp_path, srv.url, 6, 0, stop)
    try:
        time.sleep(1.0)
        assert shim.entry(srv.dest)["limit"] >= 2
        time.sleep(4)
        assert shim.entry(srv.dest)["limit"] == 3
    finally:
        finish(procs, stop)
    assert srv.between(0, time.monotonic() + 1).count(429) == 0
    assert srv.peak == 3, srv.peak


@pytest.mark.shim
def test_throttle_adaptive_keeps_most_of_a_rejecting_servers_load_off_and_stops_when_it_heals(shim, servers,
                                                                                               tmp_path):
    # a server that answers 503 to 80 % of what it gets, whatever its load:
    # 4 processes for 10 s without the key, then 10 s with it, side by side
    plain = servers(reject=0.8)
    stop = tmp_path / "stop0"
    shim.policy("[defaults]\nfailure_threshold = 0\n")
    t0 = time.monotonic()
    procs = start_loops(shim, tmp_path, plain.url, 4, 0.02, stop)
    time.sleep(10)
    finish(procs, stop)
    bare = len(plain.between(t0, time.monotonic()))
    assert bare > 100, bare

    srv = servers(reject=0.8)   # another destination: its own slot
    shim.policy("[defaults]\nfailure_threshold = 0\nthrottle = adaptive\nthrottle_window = 10s\n")
    stop = tmp_path / "stop1"
    t0 = time.monotonic()
    procs = start_loops(shim, tmp_path, srv.url, 4, 0.02, stop)
    try:
        time.sleep(10)
        t1 = time.monotonic()
        reached = len(srv.between(t0, t1))
        print(f"reached the server in 10 s: {reached} with the throttle, {bare} without")
        assert reached <= bare / 2, f"{reached} reached the server with the throttle, {bare} without"
        e = shim.entry(srv.dest)
        assert e["throttled"] > 0 and e["state"] == "closed", e
        # the server heals: within one window (10 s) nothing is refused here
        with srv.lock:
            srv.reject = 1e-9
        time.sleep(10)
        before = shim.entry(srv.dest)["throttled"]
        time.sleep(3)
        after = shim.entry(srv.dest)["throttled"]
    finally:
        got = finish(procs, stop)
    assert after == before, f"{after - before} refused here 10 s after the server healed"
    refused = sum(g.get("refused", 0) for g in got)
    e = shim.entry(srv.dest)
    # every local refusal is throttled, never a failure: the failures are
    # the server's own 503s
    assert e["throttled"] == refused and refused > 0, (e, got)
    assert e["failures"] == sum(g.get("503", 0) for g in got), (e, got)


@pytest.mark.parametrize("text,line,msg", [
    ("max_connections = 4\nmax_connections_min = 2\n", 3,
     "max_connections_min: shapes max_connections = auto, which this section (or [defaults]) does not set"),
    ("max_connections = auto\nmax_connections_min = 5\nmax_connections_max = 4\n", 4,
     "max_connections_min (5) is over max_connections_max (4)"),
    ("max_connections = auto\nadaptive_backoff = 1.5\n", 3, "adaptive_backoff: 1.5 is out of range (0.5 to 0.99)"),
    ("max_connections = auto\nadaptive_backoff = off\n", 3, "adaptive_backoff: cannot be off"),
    ("max_connections = lots\n", 2, "max_connections: bad number 'lots': expected a whole number or auto"),
    ("throttle = yes\n", 2, "throttle: bad value 'yes': expected adaptive or off"),
    ("throttle_k = 3\n", 2, "throttle_k: shapes throttle = adaptive"),
    ("throttle = adaptive\nthrottle_window = 10ms\n", 3, "throttle_window: 10ms is out of range"),
])
def test_check_names_the_file_and_line_of_a_bad_adaptive_key(tmp_path, text, line, msg):
    p = tmp_path / "p.conf"
    p.write_text("[defaults]\n" + text)
    r = subprocess.run([str(BUILD / "shimctl"), "check", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and f"{p}:{line}: {msg}" in r.stderr, r.stderr


@pytest.mark.shim
def test_status_says_the_limit_in_force_the_throttles_share_and_when_a_cooldown_ends(shim, http_server):
    # two 503s then a 429 with Retry-After: 30: auto's limit falls to its
    # floor, the throttle has 3 requests and 1 accept (the honoured 429:
    # a cooldown, no failure), so it refuses (3 - 2 x 1) / (3 + 1) = 25 %,
    # and a 30 s cooldown starts. Before, the text status showed none of
    # them (only --json had the counts)
    port = http_server("503;503;429,ra=30")
    shim.policy("[defaults]\nmax_connections = auto\nmax_connections_min = 1\nmax_connections_max = 8\n"
                "throttle = adaptive\nfailure_threshold = 0\nmode = monitor\n")   # (counts, refuses nothing)
    for want in ("503", "503", "429"):
        r = shim.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/"])
        assert r.out == want, (r.out, r.err)
    p = shim.ctl("status", env={"NETSHIM_POLICY": str(shim.policy_path)})
    assert p.returncode == 0, p.stderr
    line = [ln for ln in p.stdout.splitlines() if ln.startswith(f"127.0.0.1:{port}: ")]
    assert len(line) == 1, p.stdout
    assert "max_connections = auto: 1 now (1-8), 0 in flight" in line[0], line
    assert "throttle = adaptive refuses about 25% of new connects now (3 requests, 1 accepted" in line[0], line
    left = float(line[0].split(" s left")[0].rsplit(", ", 1)[1])
    assert 25 < left <= 30, line
