"""Hold and wait under max_connections: a process whose connect must wait
for a place while it holds idle keep-alive connections to the destination
gives up its oldest idle one (shut down, as a server's idle close looks)
instead of waiting on itself. Real programs: a hand-written client, python
requests with a pooled Session in threads, Scrapy against a keep-alive site."""
import json
import subprocess
import time

import pytest

from conftest import py_script
from test_pacing import SPIDER, RecordingServer, scrapy_missing


@pytest.fixture
def keepalive_site():
    made = []

    def start(**kw):
        s = RecordingServer(keepalive=True, **kw)
        made.append(s)
        return s

    yield start
    for s in made:
        s.stop()


# A asks and reads its answer, stays open (idle keep-alive); then B connects
# to the same place and asks; then A is tried again, as a pool would.
TWO = r"""
import errno, json, socket, sys, time
port = int(sys.argv[1])

def ask(s):
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while b"\r\n\r\nok" not in got:
        d = s.recv(4096)
        if not d:
            return got
        got += d
    return got

a = socket.create_connection(("127.0.0.1", port))
first = ask(a)
t0 = time.monotonic()
b = socket.create_connection(("127.0.0.1", port))
b_ms = (time.monotonic() - t0) * 1000
second = ask(b)
a_read = a.recv(10)          # the idle close: end of stream
try:
    a.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    a_send = 0
except OSError as e:
    a_send = e.errno
print(json.dumps({"first": first[:12].decode(), "second": second[:12].decode(), "b_ms": b_ms,
                  "a_read": a_read.decode(), "a_send": a_send}))
"""


@pytest.mark.shim
def test_a_connect_over_the_cap_takes_the_place_of_its_own_idle_connection(shim, keepalive_site, tmp_path):
    srv = keepalive_site()
    shim.policy("[defaults]\nmax_connections = 1\nqueue_timeout = 10s\n")
    r = shim.run(py_script(tmp_path, TWO) + [srv.port], timeout=60)
    assert r.rc == 0, r.err
    rep = r.last_json()
    assert rep["first"] == "HTTP/1.1 200" and rep["second"] == "HTTP/1.1 200", rep
    assert rep["b_ms"] < 5000, rep           # not the 10 s queue_timeout it waited on itself
    assert rep["a_read"] == "" and rep["a_send"] == 32, rep   # end of stream, then EPIPE
    e = shim.entry(srv.dest)
    assert e["calls"] == 2 and e["throttled"] == 0 and e["failures"] == 0, e
    assert e["stale_reuses"] == 1, e         # the send on the given-up connection
    assert e["inflight"] == 0, e


POOL = r"""
import json, sys, threading, requests
from requests.adapters import HTTPAdapter
s = requests.Session()
s.mount("http://", HTTPAdapter(pool_connections=1, pool_maxsize=10))
ok, bad = [0], []
lock = threading.Lock()

def work(t):
    for i in range(int(sys.argv[2])):
        try:
            r = s.get(f"{sys.argv[1]}q/{t}/{i}", timeout=60)
            code, answered = r.status_code, r.headers.get("X-Path")
        except Exception as e:
            with lock:
                bad.append(repr(e))
            continue
        with lock:
            ok[0] += code == 200
            if answered != f"/q/{t}/{i}":   # an answer to another request, or from elsewhere
                bad.append(f"/q/{t}/{i} answered as {answered!r}")

ts = [threading.Thread(target=work, args=(t,)) for t in range(10)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps({"ok": ok[0], "bad": bad[:3]}))
"""


@pytest.mark.shim
def test_a_requests_session_pooling_ten_lives_under_a_cap_of_two(shim, keepalive_site, tmp_path):
    srv = keepalive_site(delay=0.01)
    shim.policy("[defaults]\nmax_connections = 2\nqueue_timeout = 20s\n")
    r = shim.run(py_script(tmp_path, POOL) + [srv.url, 20], timeout=120, env={"NETSHIM_LOG": "info"})
    assert r.rc == 0, r.err
    rep = r.last_json()
    e = shim.entry(srv.dest)
    with srv.lock:
        seen = sorted(srv.paths)
    if rep != {"ok": 200, "bad": []} or len(seen) != 200:
        # (shown whole with the failure: what the shim said, what the server saw)
        print("client:", rep, "\nentry:", e, "\nserver accepts:", len(srv.accepts), "requests:", len(seen),
              "\nshim:\n" + r.err)
    assert rep == {"ok": 200, "bad": []}, rep
    assert e["throttled"] == 0 and e["failures"] == 0 and e["inflight"] == 0, e
    # each request reached the server once: nothing missing, nothing twice
    # (a loaded run once saw 180 arrivals for 200 answers; kept exact, with
    # what the shim said, to tell what happened if it comes again)
    asked = sorted(f"/q/{t}/{i}" for t in range(10) for i in range(20))
    assert seen == asked, ({"missing": sorted(set(asked) - set(seen))[:20],
                            "twice": sorted({p for p in seen if seen.count(p) > 1})[:20]}, r.err[-3000:])
    # ten threads wanted ten connections: each beyond two took an idle one's place
    assert e["calls"] > 2, e


@pytest.mark.shim
def test_scrapy_crawls_a_keepalive_site_under_a_cap_with_nothing_throttled(shim, keepalive_site, tmp_path):
    if scrapy_missing():
        pytest.skip("python3-scrapy is not installed (.ci/run installs it)")
    srv = keepalive_site(pages=200)
    # queue_timeout well past a starved machine's waits (beside four busy
    # loops the default 5 s turned 3 runs in 8 away): what is tested is that
    # no connect waits on the crawler's own idle connections (before the
    # hold-and-wait fix every one did, until its queue_timeout)
    shim.policy("[defaults]\nmax_connections = 2\nrate = 20/s\nqueue_timeout = 30s\n")
    p = tmp_path / "spider.py"
    p.write_text(SPIDER)
    r = shim.run(["/usr/bin/python3", p, srv.url], timeout=120)
    assert r.rc == 0, (r.out, r.err[-2000:])
    assert json.loads(r.out.strip().splitlines()[-1]) == {"pages": 200}, (r.out, r.err[-2000:])
    e = shim.entry(srv.dest)
    assert e["throttled"] == 0 and e["failures"] == 0, e
    # no page asked twice: no answer was cut under the crawler (a
    # connection given up mid-answer made scrapy ask 2-10 % again)
    pages = [p for p in srv.paths if p.startswith("/p/")]
    assert len(pages) == len(set(pages)), sorted(p for p in set(pages) if pages.count(p) > 1)
    t = srv.arrivals()
    # rate's guarantee, by the server's own stamps: no faster than 20 a second
    # (a starved machine only adds time, so the upper bound is only a hang's)
    assert t[-1] - t[0] >= 8.5, t[-1] - t[0]
    assert t[-1] - t[0] <= 60, t[-1] - t[0]
