#!/usr/bin/env python3
"""fwproxy.py -- a forward HTTP proxy for the tests that answers for its
upstreams itself, with no network: a request (absolute URI, or CONNECT) for a
host named in DEAD gets "502 Bad Gateway", any other "200 OK" (for CONNECT,
"200 Connection established", then the tunnel is closed). Keep-alive.

  fwproxy.py DEAD[,DEAD...]

Prints "PORT n" once listening."""
import socket, sys, threading
dead = set(sys.argv[1].split(","))
lst = socket.socket(); lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", 0)); lst.listen(64)
print("PORT", lst.getsockname()[1], flush=True)


def host_of(line):
    method, target = line.split(" ")[:2]
    if method == "CONNECT":
        return target.rsplit(":", 1)[0], True
    return target.split("://", 1)[1].split("/", 1)[0].split(":")[0], False


def serve(c):
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                d = c.recv(4096)
                if not d:
                    return
                buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            host, tunnel = host_of(head.split(b"\r\n")[0].decode())
            if host in dead:
                c.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            elif tunnel:
                c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                return
            else:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
    except OSError:
        pass
    finally:
        c.close()


while True:
    c, _ = lst.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
