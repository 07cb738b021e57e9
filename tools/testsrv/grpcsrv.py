"""grpcsrv.py -- a gRPC server for the tests (python3-grpcio), in clear text
(h2c): one unary method, /netshim.Test/Call, whose request (its bytes, no
protobuf) names the status code to answer with: b"0" answers b"ok", any
other code ends the call with that status. The method /netshim.Test/Count
answers how many calls reached it so far.

usage: python3 grpcsrv.py; prints "PORT n" when listening."""
import sys
import threading
from concurrent import futures

import grpc

calls = 0
lock = threading.Lock()


def call(request, context):
    global calls
    with lock:
        calls += 1
    code = int(request.decode() or "0")
    if code == 0:
        return b"ok"
    context.abort(next(s for s in grpc.StatusCode if s.value[0] == code), "asked for it")


def count(request, context):
    with lock:
        return str(calls).encode()


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handlers = {"Call": grpc.unary_unary_rpc_method_handler(call),
                "Count": grpc.unary_unary_rpc_method_handler(count)}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("netshim.Test", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"PORT {port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    sys.exit(main())
