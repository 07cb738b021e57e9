"""Deadlines inside poll, select and epoll: curl, wget, node, Python with a
timeout, and a fortified C client using poll, against the fault server."""
import shutil
import subprocess
import time

import pytest

from clients import NODE_GET, PY_REQUESTS
from conftest import BUILD, LATE_MS, client, near, py_script

POLICY = """
[defaults]
connect_timeout = 1s
read_timeout = 1s
failure_threshold = 100
"""



def node_script(tmp_path):
    p = tmp_path / "get.js"
    p.write_text(NODE_GET)
    return ["node", str(p)]


@pytest.fixture(autouse=True)
def need_node():
    if not shutil.which("node"):
        pytest.fail("node is needed (tools/install-deps.sh installs nodejs)")


@pytest.mark.shim
@pytest.mark.parametrize("mode,exit_code", [("silent", 56), ("blackhole", 28)])
def test_curl_is_cut_at_the_deadline(shim, server, mode, exit_code):
    srv = server(mode)
    shim.policy(POLICY)
    r = shim.run(["curl", "-sS", srv.url], timeout=20)
    assert r.rc == exit_code, r.err
    # wall time of the whole process, start-up included
    near(r.elapsed * 1000, 1000, late=LATE_MS + 200)
    assert shim.entry(srv.dest)["timeouts"] == 1


@pytest.mark.shim
def test_wget_is_cut_at_the_deadline(shim, server):
    srv = server("silent")
    shim.policy(POLICY)
    r = shim.run(["wget", "-O", "-", "--tries=1", srv.url], timeout=20)
    assert r.rc == 4, r.err
    assert "Connection timed out" in r.err
    near(r.elapsed * 1000, 1000, late=LATE_MS + 200)


@pytest.mark.shim
@pytest.mark.parametrize("mode,syscall", [("silent", "read"), ("blackhole", "connect")])
def test_node_error_event_fires_at_the_deadline(shim, server, tmp_path, mode, syscall):
    srv = server(mode)
    shim.policy(POLICY)
    res = shim.run(node_script(tmp_path) + [srv.url], timeout=20).last_json()
    assert res["ok"] is False and res["code"] == "ETIMEDOUT" and res.get("syscall") == syscall, res
    near(res["ms"], 1000)
    assert shim.entry(srv.dest)["timeouts"] == 1


@pytest.mark.shim
@pytest.mark.parametrize("mode,exc", [("silent", "ReadTimeout"), ("blackhole", "ConnectTimeout")])
def test_requests_with_a_long_timeout_is_cut_by_the_policy(shim, server, tmp_path, mode, exc):
    srv = server(mode)
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, PY_REQUESTS) + [srv.url, "10"], timeout=20).last_json()
    assert res["ok"] is False and res["exc"] == exc, res
    near(res["ms"], 1000)


def test_requests_own_short_timeout_fires_first(shim, server, tmp_path):
    srv = server("silent")
    shim.policy("[defaults]\nread_timeout = 5s\n")
    res = shim.run(py_script(tmp_path, PY_REQUESTS) + [srv.url, "0.4"], timeout=20).last_json()
    assert res["ok"] is False and res["exc"] == "ReadTimeout", res
    near(res["ms"], 400)
    assert shim.entry(srv.dest)["failures"] == 0


@pytest.mark.shim
def test_fortified_c_client_in_poll(shim, server):
    srv = server("silent")
    shim.policy(POLICY)
    res = shim.run([client("fclient"), "--poll", "--poll-nfds", "1", srv.host, srv.port], timeout=20).last_json()
    assert res["recv"] == "ETIMEDOUT", res
    near(res["recv_ms"], 1000)


@pytest.mark.shim
def test_fortified_c_client_connect_in_poll(shim, server):
    srv = server("blackhole")
    shim.policy(POLICY)
    res = shim.run([client("fclient"), "--poll", srv.host, srv.port], timeout=20).last_json()
    assert res["connect"] == "ETIMEDOUT", res
    near(res["connect_ms"], 1000)


def test_healthy_event_loop_clients_return_the_same_bytes(shim, server, tmp_path):
    srv = server("http")
    shim.policy(POLICY)
    progs = [
        ["curl", "-sS", srv.url],
        ["wget", "-q", "-O", "-", "--tries=1", srv.url],
        node_script(tmp_path) + [srv.url],
        py_script(tmp_path, PY_REQUESTS) + [srv.url, "10"],
        [client("fclient"), "--poll", srv.host, srv.port],
    ]
    for prog in progs:
        bare, under = shim.run(prog, shim=False), shim.run(prog)
        strip = lambda s: s.split('"ms"')[0]
        assert bare.rc == under.rc == 0, (prog, under.err)
        assert strip(bare.out) == strip(under.out) and "hello from faultsrv" in under.out, prog
        assert "netshim:" not in under.err


WAITS = r'''
import errno, json, os, select, socket, sys, threading, time
port, what = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
s.setblocking(False)
s.send(b"GET / HTTP/1.0\r\n\r\n")
res = {}
t0 = time.monotonic()
if what == "select_high_fd":
    fd = os.dup2(s.fileno(), 1000)
    r, w, x = select.select([fd], [], [], 10)
    res["ready"] = r == [fd]
    try:
        os.read(fd, 1)
    except OSError as e:
        res["errno"] = errno.errorcode[e.errno]
elif what == "select_own_timeout":
    r, w, x = select.select([s], [], [], 0.3)
    res["ready"] = len(r)
    res["cpu_ms"] = (time.process_time()) * 1000
elif what == "poll_with_pipe":
    rp, wp = os.pipe()
    os.write(wp, b"x")
    p = select.poll()
    p.register(s, select.POLLIN)
    p.register(rp, select.POLLIN)
    first = p.poll(10000)
    os.read(rp, 1)
    second = p.poll(10000)
    res["first"] = sorted(fd == rp for fd, ev in first)
    res["second_is_socket_err"] = [(fd == s.fileno(), bool(ev & select.POLLERR)) for fd, ev in second]
elif what in ("epoll", "epoll_oneshot", "epoll_et"):
    ep = select.epoll()
    flags = select.EPOLLIN | {"epoll": 0, "epoll_oneshot": select.EPOLLONESHOT, "epoll_et": select.EPOLLET}[what]
    ep.register(s.fileno(), flags)
    first = ep.poll(10)
    res["first"] = [(fd == s.fileno(), bool(ev & select.EPOLLERR), bool(ev & select.EPOLLIN)) for fd, ev in first]
    res["first_ms"] = (time.monotonic() - t0) * 1000
    t1 = time.monotonic()
    second = ep.poll(0.5)
    res["second"] = len(second)
    res["second_ms"] = (time.monotonic() - t1) * 1000
    try:
        s.recv(1)
    except OSError as e:
        res["errno"] = errno.errorcode[e.errno]
elif what == "epoll_threads":
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN | select.EPOLLONESHOT)
    got = []
    def waiter():
        got.append(ep.poll(3))
    ts = [threading.Thread(target=waiter) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    res["events"] = sum(len(g) for g in got)
elif what == "epoll_dup_close":
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN)
    d = os.dup(s.fileno())
    fdnum = s.fileno()
    s.close()            # the registration lives on through the dup
    ev = ep.poll(10)
    res["first"] = [(fd == fdnum, bool(e & select.EPOLLERR)) for fd, e in ev]
    try:
        os.read(d, 1)
    except OSError as e:
        res["errno"] = errno.errorcode[e.errno]
res["ms"] = (time.monotonic() - t0) * 1000
print(json.dumps(res))
'''


def waits(shim, tmp_path, srv, what):
    return shim.run(py_script(tmp_path, WAITS) + [srv.port, what], timeout=20).last_json()


@pytest.mark.shim
def test_select_at_a_high_fd(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    res = waits(shim, tmp_path, srv, "select_high_fd")
    assert res["ready"] is True and res["errno"] == "ETIMEDOUT", res
    near(res["ms"], 1000)


def test_select_own_timeout_returns_nothing_and_does_not_spin(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    res = waits(shim, tmp_path, srv, "select_own_timeout")
    assert res["ready"] == 0
    near(res["ms"], 300)


@pytest.mark.shim
def test_poll_with_a_pipe_mixed_in(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    res = waits(shim, tmp_path, srv, "poll_with_pipe")
    assert res["first"] == [True], res            # the pipe alone, at once
    assert res["second_is_socket_err"] == [[True, True]], res
    near(res["ms"], 1000)


@pytest.mark.shim
def test_epoll_level_triggered_keeps_reporting_and_recv_says_etimedout(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    res = waits(shim, tmp_path, srv, "epoll")
    assert res["first"] == [[True, True, True]], res
    near(res["first_ms"], 1000)
    assert res["second"] == 1 and res["second_ms"] < 100, res
    assert res["errno"] == "ETIMEDOUT"
    assert shim.entry(srv.dest)["timeouts"] == 1


@pytest.mark.shim
@pytest.mark.parametrize("what", ["epoll_oneshot", "epoll_et"])
def test_epoll_oneshot_and_edge_triggered_report_once(shim, server, tmp_path, what):
    srv = server("silent")
    shim.policy(POLICY)
    res = waits(shim, tmp_path, srv, what)
    assert res["first"] == [[True, True, True]], res
    assert res["second"] == 0 and res["second_ms"] >= 490, res
    assert res["errno"] == "ETIMEDOUT"


@pytest.mark.shim
def test_epoll_oneshot_wakes_one_of_several_threads(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    res = waits(shim, tmp_path, srv, "epoll_threads")
    assert res["events"] == 1, res
    assert shim.entry(srv.dest)["timeouts"] == 1


@pytest.mark.shim
def test_epoll_registration_survives_close_of_a_dup(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    res = waits(shim, tmp_path, srv, "epoll_dup_close")
    assert res["first"] == [[True, True]] and res["errno"] == "ETIMEDOUT", res
    near(res["ms"], 1000)


# ---- the epoll registry (a heap of pending deadlines per set, issue 13)

EPOLL_BEFORE_CONNECT = r'''
import errno, json, select, socket, sys, time
port = int(sys.argv[1])
s = socket.socket()
s.setblocking(False)
ep = select.epoll()
ep.register(s.fileno(), select.EPOLLOUT)   # registered before the connect,
ep.poll(0)                                 # and waited on then
try:
    s.connect(("127.0.0.1", port))
except BlockingIOError:
    pass
t0 = time.monotonic()
ev = ep.poll(5)
print(json.dumps({"ms": (time.monotonic() - t0) * 1000, "events": [e for _, e in ev],
                  "so_error": errno.errorcode.get(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), "0")}))
'''


@pytest.mark.shim
def test_epoll_registration_made_before_connect_gets_the_connect_deadline(shim, server, tmp_path):
    srv = server("blackhole")
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, EPOLL_BEFORE_CONNECT) + [srv.port], timeout=15).last_json()
    assert res["events"] and res["so_error"] == "ETIMEDOUT", res
    near(res["ms"], 1000)


# gRPC's poller: one edge-triggered registration for input and output made
# at the non-blocking connect; the connect's completion is its output event,
# then the request goes and the same registration waits for the answer
EPOLL_ET_ACROSS_CONNECT = r'''
import errno, json, select, socket, sys, time
port = int(sys.argv[1])
s = socket.socket()
s.setblocking(False)
try:
    s.connect(("127.0.0.1", port))
except BlockingIOError:
    pass
ep = select.epoll()
ep.register(s.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLET)
ev = ep.poll(5)
assert ev and ev[0][1] & select.EPOLLOUT and not s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), ev
s.send(b"GET / HTTP/1.0\r\n\r\n")
t0 = time.monotonic()
ev = ep.poll(5)
ms = (time.monotonic() - t0) * 1000
try:
    s.recv(10)
    got = "OK"
except OSError as e:
    got = errno.errorcode[e.errno]
print(json.dumps({"ms": ms, "events": [e for _, e in ev], "recv": got}))
'''


@pytest.mark.shim
def test_epoll_edge_registration_across_the_connect_gets_the_read_deadline_from_the_wait(shim, server, tmp_path):
    # its read clock starts with the wait for the answer, not at the
    # connect's deadline (a stale key: gRPC's call failed at 2 s, not 1)
    srv = server("silent")
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, EPOLL_ET_ACROSS_CONNECT) + [srv.port], timeout=15).last_json()
    assert res["events"] and res["recv"] == "ETIMEDOUT", res
    near(res["ms"], 1000)


# epoll_event is packed on x86-64: events (4 bytes), data (8)
EPOLL_POINTER_DATA = r'''
import ctypes, errno, json, socket, sys, time
class Ev(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("events", ctypes.c_uint32), ("data", ctypes.c_uint64)]
libc = ctypes.CDLL(None, use_errno=True)
port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
s.setblocking(False)
ep = libc.epoll_create1(0)
ev = Ev(0x001, 0x7f00dead0000beef)   # EPOLLIN, data like a pointer: not the fd
assert libc.epoll_ctl(ep, 1, s.fileno(), ctypes.byref(ev)) == 0
out = (Ev * 4)()
t0 = time.monotonic()
n = libc.epoll_wait(ep, out, 4, 5000)
ms = (time.monotonic() - t0) * 1000
try:
    s.recv(10)
    got = "OK"
except OSError as e:
    got = errno.errorcode[e.errno]
print(json.dumps({"n": n, "data": hex(out[0].data) if n > 0 else None, "events": out[0].events if n > 0 else 0,
                  "ms": ms, "recv": got}))
'''


@pytest.mark.shim
def test_epoll_deadline_reports_the_programs_own_data_when_it_is_not_the_fd(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, EPOLL_POINTER_DATA) + [srv.port], timeout=15).last_json()
    assert res["n"] == 1 and res["data"] == "0x7f00dead0000beef" and res["events"] & 0x8, res   # EPOLLERR
    assert res["recv"] == "ETIMEDOUT", res
    near(res["ms"], 1000)


EPOLL_MANY = r'''
import json, select, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
ep = select.epoll()
socks, sent = {}, {}
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    s.setblocking(False)
    ep.register(s.fileno(), select.EPOLLIN)
    socks[s.fileno()] = s
    if i % 50 == 49:
        # a wait starts the read clocks of the batch just registered;
        # the next batch's fall 50 ms later
        t = time.monotonic()
        assert not ep.poll(0)
        for fd in socks:
            sent.setdefault(fd, t)
        time.sleep(0.05)
late = []
while socks:
    for fd, e in ep.poll(10):
        s = socks.pop(fd, None)
        if s is None:
            continue
        ep.unregister(fd)
        late.append((time.monotonic() - sent[fd]) * 1000 - 1000)
        s.close()
late.sort()
print(json.dumps({"fired": len(late), "min_late_ms": late[0], "max_late_ms": late[-1]}))
'''


@pytest.fixture
def holder():
    """bench hold: accepts and holds any number of connections, never answers."""
    p = subprocess.Popen([str(BUILD / "bench"), "hold"], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("PORT "), line
    yield int(line.split()[1])
    p.kill()
    p.wait()


@pytest.mark.shim
def test_epoll_many_read_deadlines_each_fire_on_time(shim, holder, tmp_path):
    """500 sockets whose read clocks start in ten batches over half a
    second (at the first wait after their registration): each deadline
    fires at its own time, none early, none late."""
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, EPOLL_MANY) + [holder, 500], timeout=30).last_json()
    assert res["fired"] == 500, res
    assert res["min_late_ms"] >= -5 and res["max_late_ms"] <= LATE_MS, res


# a client calling libc's select itself (ctypes), its request sent, the
# silent server never answering; RECV_AFTER reads once and tells the errno
CTYPES_CLIENT = r'''
import ctypes, errno, json, select, socket, sys, time
class Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]
libc = ctypes.CDLL(None, use_errno=True)
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
fd = s.fileno()
'''
RECV_AFTER = r'''
try:
    s.recv(10)
    got = "OK"
except OSError as e:
    got = errno.errorcode[e.errno]
'''

SELECT_ONE = CTYPES_CLIENT + r'''
rset = (ctypes.c_ulong * 16)()
rset[fd // 64] |= 1 << (fd % 64)
tv = Timeval(5, 0)
t0 = time.monotonic()
n = libc.select(fd + 1, ctypes.byref(rset), None, None, ctypes.byref(tv))
ms = (time.monotonic() - t0) * 1000
''' + RECV_AFTER + r'''
print(json.dumps({"n": n, "readable": bool(rset[fd // 64] >> (fd % 64) & 1), "ms": ms,
                  "left_ms": tv.sec * 1000 + tv.usec / 1000, "recv": got}))
'''


BUSY_ZERO = CTYPES_CLIENT + r'''
how = sys.argv[2]
if how == "poll":
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLOUT)
elif how == "epoll":
    ep = select.epoll()
    ep.register(fd, select.EPOLLIN | select.EPOLLOUT)
t0, polls, writable, n, tv = time.monotonic(), 0, 0, 0, None
while time.monotonic() - t0 < 5:
    polls += 1
    if how == "select":
        rset, wset = (ctypes.c_ulong * 16)(), (ctypes.c_ulong * 16)()
        rset[fd // 64] |= 1 << (fd % 64)
        wset[fd // 64] |= 1 << (fd % 64)
        tv = Timeval(0, 0)
        n = libc.select(fd + 1, ctypes.byref(rset), ctypes.byref(wset), None, ctypes.byref(tv))
        out, inp = wset[fd // 64] >> (fd % 64) & 1, rset[fd // 64] >> (fd % 64) & 1
        tv = [tv.sec, tv.usec]
    else:
        evs = p.poll(0) if how == "poll" else ep.poll(0)
        n = len(evs)
        ev = evs[0][1] if evs else 0
        out, inp = ev & select.POLLOUT, ev & select.POLLIN
    writable += bool(out)
    if inp:
        break
    time.sleep(0.001)
ms = (time.monotonic() - t0) * 1000
''' + RECV_AFTER + r'''
print(json.dumps({"n": n, "ms": ms, "polls": polls, "writable": writable, "tv": tv, "recv": got}))
'''


@pytest.mark.shim
@pytest.mark.parametrize("how", ["select", "poll", "epoll"])
def test_a_busy_loop_of_zero_timeout_waits_for_input_and_output_meets_the_read_deadline(shim, server, tmp_path, how):
    """A zero-timeout select, poll or epoll_wait on a socket asked for input
    and output, over and over: writable every time, and readable once the
    read deadline has passed (output alone does not answer the wait for
    input), where the read fails with ETIMEDOUT."""
    srv = server("silent")
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, BUSY_ZERO) + [srv.port, how], timeout=15).last_json()
    assert res["recv"] == "ETIMEDOUT" and res["n"] == (2 if how == "select" else 1), res
    assert res["writable"] == res["polls"] and res["polls"] > 50, res
    if how == "select":
        assert res["tv"] == [0, 0], res
    near(res["ms"], 1000)


UNREAD = CTYPES_CLIENT + r'''
t0, polls, readable, first, lapses = time.monotonic(), 0, 0, None, 0
while time.monotonic() - t0 < 1.6:
    rset = (ctypes.c_ulong * 16)()
    rset[fd // 64] |= 1 << (fd % 64)
    tv = Timeval(0, 0)
    libc.select(fd + 1, ctypes.byref(rset), None, None, ctypes.byref(tv))
    polls += 1
    r = rset[fd // 64] >> (fd % 64) & 1
    readable += r
    if r and first is None:
        first = time.monotonic() - t0
    lapses += first is not None and not r      # not readable again after it was
    time.sleep(0.001)
try:
    got = s.recv(12).decode()
except OSError as e:
    got = errno.errorcode[e.errno]
print(json.dumps({"polls": polls, "readable": readable, "first_s": first, "lapses": lapses, "recv": got}))
'''


def test_input_left_unread_through_zero_timeout_selects_is_not_cut_by_the_read_deadline(shim, server, tmp_path):
    """The answer arrives at once; the program looks with zero-timeout
    selects for longer than read_timeout (1 s) without reading it: every
    look says readable, and the read then gets the answer, not ETIMEDOUT
    (input waiting to be read is no wait for input)."""
    srv = server("http")
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, UNREAD) + [srv.port], timeout=15).last_json()
    assert res["recv"] == "HTTP/1.1 200", res
    # readable from the answer's arrival on (well inside the deadline, even
    # on a loaded machine) to the end, past the deadline: never cut
    assert res["first_s"] is not None and res["first_s"] < 0.9 and res["lapses"] == 0, res
    assert res["polls"] > 50 and res["readable"] > 0.4 * res["polls"], res


@pytest.mark.shim
def test_select_of_one_socket_meets_the_read_deadline_and_leaves_the_time_not_slept(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, SELECT_ONE) + [srv.port], timeout=15).last_json()
    assert res["n"] == 1 and res["readable"] and res["recv"] == "ETIMEDOUT", res
    near(res["ms"], 1000)
    assert 5000 - res["ms"] - 50 <= res["left_ms"] <= 5000 - res["ms"] + 50, res
