#!/usr/bin/env python3
"""kaloop.py -- N requests over one kept-alive connection, plain or TLS,
for the benchmark: prints microseconds per request.

  kaloop.py PORT plain|tls N"""
import socket, ssl, sys, time
port, tls, n = int(sys.argv[1]), sys.argv[2] == "tls", int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
if tls:
    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    s = ctx.wrap_socket(s)
req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
t0 = time.perf_counter()
for i in range(n):
    s.sendall(req)
    got = b""
    while not got.endswith(b"xxxxx"):
        got += s.recv(4096)
print(f"{(time.perf_counter() - t0) / max(n, 1) * 1e6:.1f}")
