"""The keep-alive soak (issue 20): clients that reuse connections (http.client,
requests, curl, wget, node) against a server that closes idle connections
at random, for NETSHIM_SOAK_SECONDS (60 by default): no failure counted, no
trip. A reused connection that the server closed while the client's next
request was on its way is a stale reuse, not a failure."""
import json
import os
import subprocess
import time

import pytest

from conftest import BUILD, NEGATIVE, PY, base_env, py_script

SECONDS = float(os.environ.get("NETSHIM_SOAK_SECONDS", "60"))

HTTPCLIENT = r'''
import http.client, json, random, sys, time
port, until = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
random.seed(1)
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
ok = err = 0
while time.monotonic() < until:
    for attempt in (0, 1):          # a stale connection: send again, once, anew
        try:
            conn.request("GET", "/"); r = conn.getresponse(); r.read()
            ok += r.status == 200
            break
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()
            err += attempt
    time.sleep(random.uniform(0, 0.6))
print(json.dumps({"ok": ok, "err": err}))
'''

REQUESTS = r'''
import json, random, sys, time, requests
port, until = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
random.seed(2)
s = requests.Session(); ok = err = 0
while time.monotonic() < until:
    try:
        ok += s.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 200
    except requests.exceptions.ConnectionError:
        err += 1
    time.sleep(random.uniform(0, 0.6))
print(json.dumps({"ok": ok, "err": err}))
'''

NODE = r'''
const http = require("http");
const [port, secs] = [Number(process.argv[2]), Number(process.argv[3])];
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const until = Date.now() + secs * 1000;
let ok = 0, err = 0, x = 3;
const rnd = () => { x = (x * 1103515245 + 12345) % 2147483648; return x / 2147483648; };
function one() {
  if (Date.now() >= until) { console.log(JSON.stringify({ ok, err })); agent.destroy(); return; }
  http.get({ host: "127.0.0.1", port, path: "/", agent }, (res) => {
    res.resume(); res.on("end", () => { ok += res.statusCode === 200; setTimeout(one, rnd() * 600); });
  }).on("error", () => { err++; setTimeout(one, rnd() * 600); });
}
one();
'''


def loop(cmd, secs):
    """A shell loop that runs cmd until secs have passed."""
    return ["sh", "-c", f'end=$(($(date +%s) + {int(secs)})); while [ $(date +%s) -lt $end ]; do {cmd}; done']


@pytest.mark.shim
def test_keep_alive_soak_counts_no_failure_and_trips_nothing(shim, server, tmp_path):
    srv = server("keepalive", idle=400, idle_random=True)
    shim.policy("[defaults]\nfailure_threshold = 3\nread_timeout = 10s\n")
    urls = " ".join(f"{srv.url}?{i}" for i in range(8))
    node = tmp_path / "soak.js"
    node.write_text(NODE)
    cmds = {
        "http.client": py_script(tmp_path, HTTPCLIENT) + [srv.port, SECONDS],
        "requests": py_script(tmp_path, REQUESTS) + [srv.port, SECONDS],
        "node": ["node", str(node), str(srv.port), str(SECONDS)],
        "curl": loop(f"curl -s --rate 4/s {urls} >/dev/null", SECONDS),
        "wget": loop(f"wget -q -O /dev/null --wait=0.3 --random-wait {urls}", SECONDS),
    }
    env = base_env(shim.table, shim.policy_path)
    procs = {k: subprocess.Popen([str(BUILD / "shimrun"), "--policy", str(shim.policy_path), "--"] + [str(a) for a in v],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for k, v in cmds.items()}
    outs = {}
    for k, p in procs.items():
        try:
            out, err = p.communicate(timeout=3 if NEGATIVE else SECONDS + 60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs[k] = (p.returncode, out, err)
    for k in ("http.client", "requests", "node"):
        rc, out, err = outs[k]
        assert rc == 0 and json.loads(out)["ok"] > 10, (k, out, err)
    assert json.loads(outs["http.client"][1])["err"] == 0, outs["http.client"]
    e = shim.entry(srv.dest)
    assert e is not None, "no entry: the shim saw nothing"
    opened = [ev for ev in map(json.loads, shim.ctl("events", "--json").stdout.splitlines()) if ev["event"] == "opened"]
    # the soak met the race it is about, and counted none of it as a failure
    assert e["stale_reuses"] > 0, e
    assert (e["state"], e["failures"], e["timeouts"], e["rejected"], opened) == ("closed", 0, 0, 0, []), e
    assert e["successes"] >= 100, e
