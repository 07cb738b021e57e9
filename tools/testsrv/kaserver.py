#!/usr/bin/env python3
"""kaserver.py -- a keep-alive HTTP/1.1 (or HTTPS) server for the exchange
tests and the benchmark: each request gets the next answer of its script
(the last repeats).

  kaserver.py SCRIPT [CERT KEY]

An answer is "CODE", "100+CODE" (an interim 100 first), "100lf+CODE" (the
interim 100's lines end in a bare LF, as some servers send), "silent" (never
answers) or "stallbody" (a 200 whose body ends with the stream: 1,000 bytes
of it, then nothing), with ",drip" to send it a byte at a time, ",close" to close
after it (saying so: "Connection: close"), ",ra=N" to add "Retry-After: N"
(",radate=N": the HTTP date N seconds from now), ",delay=N" to answer N ms
after the request, ",hdrs=N" to add N headers more ("X-Pad-i: i"), and ",drop" to close after it
without saying so, as a server does with a keep-alive connection whose idle
time ran out (the client's next request on it meets the end of the stream);
steps are separated by ";". Prints "PORT n" once listening."""
import socket, sys, threading, time
script = sys.argv[1].split(";")
lst = socket.socket(); lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", 0)); lst.listen(16)
print("PORT", lst.getsockname()[1], flush=True)
n = [0]
def serve(c):
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            d = c.recv(4096)
            if not d:
                c.close(); return
            buf += d
        _, buf = buf.split(b"\r\n\r\n", 1)
        step = script[min(n[0], len(script) - 1)].split(","); n[0] += 1
        if step[0] == "silent":
            time.sleep(30); c.close(); return
        if step[0] == "stallbody":
            c.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"a" * 1000)
            time.sleep(30); c.close(); return
        out = b""
        code = step[0]
        if code.startswith("100+"):
            out += b"HTTP/1.1 100 Continue\r\n\r\n"; code = code[4:]
        elif code.startswith("100lf+"):
            out += b"HTTP/1.1 100 Continue\nX-Note: bare LF\n\n"; code = code[6:]
        body = b"x" * 5
        ra = b""
        for opt in step[1:]:
            if opt.startswith("ra="):
                ra += b"Retry-After: %s\r\n" % opt[3:].encode()
            elif opt.startswith("hdrs="):
                ra += b"".join(b"X-Pad-%d: %d\r\n" % (i, i) for i in range(int(opt[5:])))
            elif opt.startswith("delay="):   # the answer after N ms
                time.sleep(int(opt[6:]) / 1000)
            elif opt.startswith("radate="):
                import email.utils
                ra += b"Retry-After: %s\r\n" % email.utils.formatdate(time.time() + float(opt[7:]),
                                                                        usegmt=True).encode()
        out += b"HTTP/1.1 %s Whatever\r\nContent-Length: 5\r\n%s%s\r\n" % (code.encode(), ra,
               b"Connection: close\r\n" if "close" in step else b"") + body
        if "drip" in step:
            for i in range(len(out)):
                c.sendall(out[i:i + 1]); time.sleep(0.002)
        else:
            c.sendall(out)
        if "close" in step or "drop" in step:
            c.close(); return
ctx = None
if len(sys.argv) > 2:                   # HTTPS: certificate and key
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
def start(c):
    try:
        serve(ctx.wrap_socket(c, server_side=True) if ctx else c)
    except (OSError, ValueError):
        c.close()
while True:
    c, _ = lst.accept()
    threading.Thread(target=start, args=(c,), daemon=True).start()
