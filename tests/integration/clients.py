"""Client programs the tests run under the shim."""

# A Python blocking socket with no timeout: connect, send a request, read
# until the peer closes. Prints one JSON line.
PY_SOCKET = r'''
import errno, json, socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
phase, data, t0 = "connect", b"", time.monotonic()
try:
    s.connect((host, port))
    phase, t0 = "recv", time.monotonic()
    s.sendall(b"GET / HTTP/1.0\r\nHost: t\r\n\r\n")
    while True:
        b = s.recv(4096)
        if not b:
            break
        data += b
    res = {"phase": "done", "errno": "OK"}
except OSError as e:
    res = {"phase": phase, "errno": errno.errorcode.get(e.errno, str(e.errno))}
res.update(ms=(time.monotonic() - t0) * 1000, bytes=len(data), body=data.decode("latin-1"))
print(json.dumps(res))
'''

# requests.get with no timeout (or the one given); reports the errno found
# anywhere in the exception chain.
PY_REQUESTS = r'''
import errno, json, sys, time
import requests
url = sys.argv[1]
kw = {"timeout": float(sys.argv[2])} if len(sys.argv) > 2 else {}
def find_errno(x, seen=()):
    if x is None or id(x) in seen:
        return None
    seen = seen + (id(x),)
    if isinstance(x, OSError) and x.errno:
        return errno.errorcode.get(x.errno, str(x.errno))
    for a in getattr(x, "args", ()):
        if isinstance(a, BaseException):
            r = find_errno(a, seen)
            if r:
                return r
    return find_errno(x.__cause__, seen) or find_errno(x.__context__, seen) or find_errno(getattr(x, "reason", None), seen)
t0 = time.monotonic()
try:
    r = requests.get(url, **kw)
    res = {"ok": True, "status": r.status_code, "body": r.text}
except Exception as e:
    res = {"ok": False, "exc": type(e).__name__, "errno": find_errno(e), "text": str(e)[:300]}
res["ms"] = (time.monotonic() - t0) * 1000
print(json.dumps(res))
'''

# Non-blocking Python socket: connect returns EINPROGRESS, recv EAGAIN.
PY_NONBLOCK = r'''
import errno, json, select, socket, sys, time
host, port, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setblocking(False)
res = {}
try:
    s.connect((host, port))
    res["connect"] = "OK"
except OSError as e:
    res["connect"] = errno.errorcode.get(e.errno, str(e.errno))
if what == "recv":
    select.select([], [s], [], 5)
    res["so_error"] = errno.errorcode.get(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), "OK")
    try:
        s.recv(10)
        res["recv"] = "OK"
    except OSError as e:
        res["recv"] = errno.errorcode.get(e.errno, str(e.errno))
elif what == "wait":
    select.select([], [s], [], 5)
    res["so_error"] = errno.errorcode.get(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), "OK")
print(json.dumps(res))
'''

# node http.get with no timeout of its own; prints one JSON line.
NODE_GET = r'''
const http = require("http");
const t0 = Date.now();
http.get(process.argv[2], (res) => {
  let body = "";
  res.setEncoding("latin1");
  res.on("data", (d) => (body += d));
  res.on("end", () => console.log(JSON.stringify({ ok: true, status: res.statusCode, body, ms: Date.now() - t0 })));
  res.on("error", (e) => console.log(JSON.stringify({ ok: false, code: e.code, ms: Date.now() - t0 })));
}).on("error", (e) => console.log(JSON.stringify({ ok: false, code: e.code, syscall: e.syscall, ms: Date.now() - t0 })));
'''
