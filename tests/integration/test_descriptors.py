"""Descriptor bookkeeping: dup, fd reuse after close, exec, fcntl."""
import pytest

from conftest import py_script

POLICY = "[defaults]\nread_timeout = 1s\nconnect_timeout = 1s\n"


@pytest.mark.shim
def test_deadline_follows_a_dup_after_the_original_is_closed(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    script = py_script(tmp_path, r'''
import errno, json, os, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
fd = os.dup(s.fileno())
s.close()
t0 = time.monotonic()
try:
    os.read(fd, 10)
    res = {"errno": "OK"}
except OSError as e:
    res = {"errno": errno.errorcode[e.errno]}
res["ms"] = (time.monotonic() - t0) * 1000
print(json.dumps(res))
''')
    res = shim.run(script + [srv.port], timeout=10).last_json()
    assert res["errno"] == "ETIMEDOUT" and 995 <= res["ms"] <= 1300, res
    assert shim.entry(srv.dest)["timeouts"] == 1


def test_a_reused_fd_number_is_not_treated_as_the_old_socket(shim, server, tmp_path):
    # after close, the number comes back as a non-blocking pipe: its EAGAIN
    # must stay EAGAIN, and its data must be untouched
    srv = server("silent")
    shim.policy(POLICY)
    script = py_script(tmp_path, r'''
import errno, json, os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
old = s.fileno()
s.close()
r, w = os.pipe()
res = {"reused": r == old or w == old}
os.set_blocking(r, False)
try:
    os.read(r, 1)
    res["empty"] = "OK"
except OSError as e:
    res["empty"] = errno.errorcode[e.errno]
os.write(w, b"data")
res["data"] = os.read(r, 10).decode()
print(json.dumps(res))
''')
    res = shim.run(script + [srv.port]).last_json()
    assert res == {"reused": True, "empty": "EAGAIN", "data": "data"}


@pytest.mark.shim
def test_dup2_over_a_governed_fd_and_exec_reinitialise(shim, server, tmp_path):
    # the shell execs the client: the new image's shim reads the policy again
    srv = server("silent")
    shim.policy(POLICY)
    from conftest import client
    r = shim.run(["sh", "-c", f'exec "$0" "$@"', client("fclient"), srv.host, srv.port], timeout=10)
    res = r.last_json()
    assert res["recv"] == "ETIMEDOUT", res


@pytest.mark.shim
def test_switching_to_nonblocking_with_fcntl_is_seen(shim, server, tmp_path):
    # a non-blocking read's EAGAIN is the program's business, never a timeout
    srv = server("silent")
    shim.policy(POLICY)
    script = py_script(tmp_path, r'''
import errno, fcntl, json, os, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
fl = fcntl.fcntl(s.fileno(), fcntl.F_GETFL)
fcntl.fcntl(s.fileno(), fcntl.F_SETFL, fl | os.O_NONBLOCK)
res = {}
try:
    os.read(s.fileno(), 1)
except OSError as e:
    res["nonblocking"] = errno.errorcode[e.errno]
fcntl.fcntl(s.fileno(), fcntl.F_SETFL, fl)
t0 = time.monotonic()
try:
    os.read(s.fileno(), 1)
except OSError as e:
    res["blocking"] = errno.errorcode[e.errno]
res["ms"] = (time.monotonic() - t0) * 1000
print(json.dumps(res))
''')
    res = shim.run(script + [srv.port], timeout=10).last_json()
    assert (res["nonblocking"], res["blocking"]) == ("EAGAIN", "ETIMEDOUT"), res


@pytest.mark.shim
def test_connect_polled_until_eisconn_is_one_call(shim, server, tmp_path):
    srv = server("http")
    shim.policy(POLICY)
    script = py_script(tmp_path, r'''
import errno, json, select, socket, sys
s = socket.socket(); s.setblocking(False)
codes = []
while True:
    rc = s.connect_ex(("127.0.0.1", int(sys.argv[1])))
    codes.append(errno.errorcode.get(rc, "OK"))
    if rc in (0, errno.EISCONN) or len(codes) > 50:
        break
    select.select([], [s], [], 2)
codes.append(errno.errorcode.get(s.connect_ex(("127.0.0.1", int(sys.argv[1]))), "OK"))
s.setblocking(True)
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
body = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    body += b
print(json.dumps({"last": codes[-1], "ok": b"200 OK" in body}))
''')
    assert shim.run(script + [srv.port]).last_json() == {"last": "EISCONN", "ok": True}
    e = shim.entry(srv.dest)
    assert (e["calls"], e["successes"], e["failures"]) == (1, 1, 0)


@pytest.mark.shim
def test_a_new_connect_after_a_failed_one_is_a_new_call(shim, server, tmp_path):
    srv = server("refuse")
    shim.policy(POLICY)
    script = py_script(tmp_path, r'''
import errno, json, socket, sys
s = socket.socket()
codes = [errno.errorcode.get(s.connect_ex(("127.0.0.1", int(sys.argv[1]))), "OK") for _ in range(2)]
print(json.dumps({"codes": codes}))
''')
    assert shim.run(script + [srv.port]).last_json() == {"codes": ["ECONNREFUSED", "ECONNREFUSED"]}
    e = shim.entry(srv.dest)
    assert (e["calls"], e["failures"]) == (2, 2)


TIMEOUTS = r'''
import errno, json, socket, struct, sys, time
port, how = int(sys.argv[1]), sys.argv[2]
s = socket.socket()
if how == "nonblocking_then_blocking":
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    time.sleep(0.1)
    s.setblocking(True)
else:
    ms = int(how)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", ms // 1000, (ms % 1000) * 1000))
    s.connect(("127.0.0.1", port))
t0 = time.monotonic()
try:
    s.recv(1)
    res = {"errno": "OK"}
except OSError as e:
    res = {"errno": errno.errorcode[e.errno]}
res["ms"] = (time.monotonic() - t0) * 1000
print(json.dumps(res))
'''


@pytest.mark.shim
def test_a_socket_turned_blocking_after_a_nonblocking_connect_gets_the_read_deadline(shim, server, tmp_path):
    srv = server("silent")
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, TIMEOUTS) + [srv.port, "nonblocking_then_blocking"], timeout=10).last_json()
    assert res["errno"] == "ETIMEDOUT" and 995 <= res["ms"] <= 1300, res


@pytest.mark.parametrize("own_ms,errname,at_ms", [(300, "EAGAIN", 300), (5000, "ETIMEDOUT", 1000)])
def test_a_timeout_set_before_connect_is_honoured(shim, server, tmp_path, own_ms, errname, at_ms):
    srv = server("silent")
    shim.policy(POLICY)
    res = shim.run(py_script(tmp_path, TIMEOUTS) + [srv.port, own_ms], timeout=10).last_json()
    assert res["errno"] == errname and at_ms - 5 <= res["ms"] <= at_ms + 300, res
