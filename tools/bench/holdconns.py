"""make bench: N connections to the holder at PORT kept open and idle for
SECONDS (the seccomp engine watches each): prints "ready" once all are
open, then "done"."""
import resource
import socket
import sys
import time

n, port, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 64)), hard))
socks = []
for _ in range(n):
    s = socket.socket()
    s.connect(("127.0.0.1", port))
    socks.append(s)
print("ready", flush=True)
time.sleep(seconds)
print("done", flush=True)
