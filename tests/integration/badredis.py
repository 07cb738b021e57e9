"""badredis.py -- a Redis that answers the agent's set-up commands properly
(its first TIME on a connection among them) and then misbehaves on its polls (the audit of issue 24, items 11 and 12):

  badredis.py trickle   the reply to TIME comes one byte per 0.5 s
  badredis.py huge      the reply to TIME claims 10^9 elements, then sends
                        one-byte strings as fast as the socket takes them

Prints "PORT n" once listening, and "POLL" each time a poll begins."""
import socket
import sys
import threading
import time

MODE = sys.argv[1]
lst = socket.socket()
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", 0))
lst.listen(16)
print("PORT", lst.getsockname()[1], flush=True)


def commands(c):
    """Each command as a list of bytes (the agent sends arrays of bulk strings)."""
    buf = b""
    while True:
        while b"\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        line, buf = buf.split(b"\r\n", 1)
        n, args = int(line[1:]), []
        for _ in range(n):
            while b"\r\n" not in buf:
                buf += c.recv(65536)
            hdr, buf = buf.split(b"\r\n", 1)
            size = int(hdr[1:])
            while len(buf) < size + 2:
                buf += c.recv(65536)
            args.append(buf[:size])
            buf = buf[size + 2:]
        yield args


def serve(c):
    polled = False
    try:
        for args in commands(c):
            cmd = args[0].upper()
            if cmd in (b"PING",):
                c.sendall(b"+PONG\r\n")
            elif cmd in (b"AUTH", b"SELECT"):
                c.sendall(b"+OK\r\n")
            elif cmd == b"SCRIPT":
                c.sendall(b"$40\r\n" + b"0" * 40 + b"\r\n")
            elif cmd == b"GET":
                c.sendall(b"$-1\r\n")
            elif cmd == b"SUBSCRIBE":
                c.sendall(b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(args[1]), args[1]))
            elif cmd == b"TIME" and not polled:
                # the agent's first TIME on a connection is its set-up
                # (Redis's clock for what it writes before its first poll)
                polled = True
                c.sendall(b"*2\r\n$10\r\n%d\r\n$6\r\n000000\r\n" % int(time.time()))
            elif cmd == b"TIME":
                print("POLL", flush=True)
                if MODE == "trickle":
                    for b in b"*2\r\n$10\r\n1700000000\r\n$6\r\n000000\r\n":
                        c.sendall(bytes([b]))
                        time.sleep(0.5)
                else:
                    c.sendall(b"*1000000000\r\n")
                    chunk = b"$1\r\na\r\n" * 100000
                    end = time.monotonic() + 20
                    while time.monotonic() < end:
                        c.sendall(chunk)
            else:
                c.sendall(b"-ERR unknown command\r\n")
    except OSError:
        pass
    finally:
        c.close()


while True:
    conn, _ = lst.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
