"""netshim-agent --metrics-listen (issue 24 item 7): /metrics in the
Prometheus text format for the table and the agent, checked by promtool and
scraped by a real Prometheus whose answer must equal shimctl status."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from conftest import BUILD, ROOT
from test_fleet import Node, free_port, redis_single, trip, wait_for  # noqa: F401


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


@pytest.fixture
def metered(tmp_path, redis_single):
    port = free_port()
    node = Node("n1", tmp_path, redis_single.url)
    # (the agent reads the programs' policy: the fleet limits' panel)
    node.start_agent("--metrics-listen", f"127.0.0.1:{port}", quorum=1,
                     env=dict(os.environ, NETSHIM_POLICY=str(node.shim.policy_path)))
    yield node, port
    node.stop_agent()
    node.shim.cleanup()


@pytest.mark.shim
@pytest.mark.agent
def test_metrics_serve_the_table_and_the_agent_and_pass_promtool(metered, server):
    node, port = metered
    ok, bad = server("http"), server("reset")
    for _ in range(2):
        node.shim.run(["curl", "-s", "-o", "/dev/null", ok.url])
    trip(node, bad)
    assert wait_for(lambda: 'netshim_fleet_votes{destination="%s"' % bad.dest in scrape(port)[2], 3) is not None
    status, ctype, text = scrape(port)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), (status, ctype)
    labels = f'destination="{ok.dest}",server_address="127.0.0.1",server_port="{ok.port}"'
    assert f'netshim_calls_total{{{labels},outcome="allowed"}} 2' in text, text
    bad_labels = f'destination="{bad.dest}",server_address="127.0.0.1",server_port="{bad.port}"'
    assert f'netshim_breaker_state{{{bad_labels},state="open"}} 1' in text
    assert f'netshim_last_failure_info{{{bad_labels},error_type="ECONNRESET"}} 1' in text
    assert f'netshim_fleet_votes{{{bad_labels}}} 1' in text
    assert 'netshim_agent_redis_connected{node="n1"} 1' in text
    # every series the alert rules (tools/agent/prometheus) read is served
    for name in ("netshim_breaker_state", "netshim_fleet_held", "netshim_agent_redis_connected",
                 "netshim_agent_suspect"):
        assert f"# TYPE {name} gauge" in text, name
    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
    assert e.value.code == 404


@pytest.mark.agent
def test_a_client_trickling_its_request_cannot_hold_the_agent(metered):
    node, port = metered
    import socket
    polls0 = node.status_doc()["agent"]["polls"]
    slow = socket.create_connection(("127.0.0.1", port))
    for ch in b"GET /metrics HTT":               # a byte every 0.2 s: 3.2 s if it were waited for
        try:
            slow.send(bytes([ch]))
        except OSError:
            pass                                   # cut off: as it should be
        time.sleep(0.2)
    polls = node.status_doc()["agent"]["polls"] - polls0
    slow.close()
    # the agent (polling every 200 ms) gave the client half a second, then went on
    assert polls >= 8, f"{polls} polls while a client trickled its request for 3.2 s"
    status, _, text = scrape(port)
    assert status == 200 and "netshim_agent_polls_total" in text


@pytest.fixture
def prometheus(tmp_path):
    """A real Prometheus (Debian's) scraping the agent's /metrics every
    second: its URL, once it answers."""
    procs = []

    def start(target_port):
        port = free_port()
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: netshim\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n")
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return f"http://127.0.0.1:{port}"
    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def instant(url, expr):
    """The series an instant query returns ([] when none, or Prometheus not up yet)."""
    q = urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as r:
            return json.load(r)["data"]["result"]
    except OSError:
        return []


HAS_PROMETHEUS = shutil.which("prometheus") and shutil.which("promtool")


@pytest.mark.shim
@pytest.mark.agent
@pytest.mark.skipif(not HAS_PROMETHEUS, reason="Debian's prometheus is not installed")
def test_a_real_prometheus_scrapes_the_agent_and_agrees_with_status(metered, server, prometheus):
    node, port = metered
    srv = server("http")
    for _ in range(3):
        node.shim.run(["curl", "-s", "-o", "/dev/null", srv.url])
    url = prometheus(port)
    query = f'netshim_calls_total{{destination="{srv.dest}",outcome="allowed"}}'

    def answer():
        p = subprocess.run(["promtool", "query", "instant", "-o", "json", url, query], capture_output=True, text=True)
        if p.returncode != 0 or not p.stdout.strip():
            return None
        res = json.loads(p.stdout)
        return int(float(res[0]["value"][1])) if res else None
    assert wait_for(lambda: answer() is not None, 20) is not None, "Prometheus never scraped the agent"
    assert answer() == node.shim.entry(srv.dest)["calls"] == 3


DASHBOARD = ROOT / "tools" / "agent" / "grafana" / "netshim.json"


@pytest.mark.shim
@pytest.mark.agent
@pytest.mark.skipif(not HAS_PROMETHEUS, reason="Debian's prometheus is not installed")
def test_every_dashboard_panel_query_returns_data_and_the_panels_render(metered, server, prometheus, tmp_path):
    node, port = metered
    ok, slow, bad = server("http"), server("http", delay=30), server("reset")
    # the adaptive limits' panels: one destination under max_connections =
    # auto, one under max_requests = auto; the fleet limits' panel: one
    # under fleet_max_requests (this machine's agent leases its share)
    pol = node.shim.policy_path
    pol.write_text(pol.read_text() + f'\n[host "{ok.dest}"]\nmax_connections = auto\nfleet_max_requests = 8\n'
                   f'\n[host "{slow.dest}"]\nmax_requests = auto\n')
    url = prometheus(port)
    assert wait_for(lambda: instant(url, "netshim_agent_redis_connected"), 20) is not None, "no scrape"
    trip(node, bad)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 6:   # traffic across several scrapes: rates and quantiles have data
        node.shim.run(["curl", "-s", "-o", "/dev/null", ok.url])
        node.shim.run(["curl", "-s", "-o", "/dev/null", slow.url])
        time.sleep(0.2)
    time.sleep(1.5)
    dash = json.loads(DASHBOARD.read_text())
    empty = [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]
             if not instant(url, t["expr"].replace("$__rate_interval", "10s"))]
    assert not empty, empty
    out = tmp_path / "dashboard.svg"
    subprocess.run([sys.executable, str(DASHBOARD.parent / "render_svg.py"), str(DASHBOARD), url, "30", str(out),
                    "10s"], check=True, timeout=60)
    svg = out.read_text()
    assert svg.count("<polyline") >= len(dash["panels"]) and all(p["title"] in svg for p in dash["panels"])
    if os.environ.get("NETSHIM_DASHBOARD_SVG"):   # docs/dashboard.svg is this picture
        shutil.copy(out, os.environ["NETSHIM_DASHBOARD_SVG"])


RULES = ROOT / "tools" / "agent" / "prometheus"


@pytest.mark.skipif(not shutil.which("promtool"), reason="Debian's prometheus is not installed")
def test_the_alert_rules_check_and_pass_their_unit_tests():
    p = subprocess.run(["promtool", "check", "rules", str(RULES / "netshim-rules.yml")], capture_output=True, text=True)
    assert p.returncode == 0 and "SUCCESS: 5 rules found" in p.stdout, p.stdout + p.stderr
    p = subprocess.run(["promtool", "test", "rules", str(RULES / "netshim-rules.test.yml")], capture_output=True,
                       text=True)
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


@pytest.mark.shim
@pytest.mark.agent
def test_two_hundred_silent_and_trickling_clients_hold_nothing_back(metered, tmp_path, redis_single, server):
    """100 clients that connect and say nothing and 100 that trickle a byte
    now and then, each reconnecting as soon as the agent cuts it off, for
    4 s: the agent's passes go on (12 silent clients stopped every one of
    them: 0 polls in 6 s), a trip on another machine reaches it as usual,
    and a real scrape is answered."""
    import socket
    import threading
    node, port = metered
    other = Node("n2", tmp_path, redis_single.url)
    other.start_agent(quorum=1)
    srv = server("reset")
    stop = threading.Event()

    def pest(trickle):
        s = None
        while not stop.is_set():
            try:
                if s is None:
                    s = socket.create_connection(("127.0.0.1", port), timeout=2)
                if trickle:
                    s.send(b"G")
                time.sleep(0.1)
            except OSError:
                if s:
                    s.close()
                s = None
        if s:
            s.close()

    threads = [threading.Thread(target=pest, args=(i % 2 == 1,), daemon=True) for i in range(200)]
    try:
        polls0 = node.status_doc()["agent"]["polls"]
        for t in threads:
            t.start()
        time.sleep(0.5)
        trip(other, srv)
        took = wait_for(lambda: node.state(srv.dest) == "fleet_open", 5)
        assert took is not None, node.log()
        scraped = None
        for _ in range(5):
            try:
                scraped = scrape(port)
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(max(0.0, 3.0 - took))
        polls = node.status_doc()["agent"]["polls"] - polls0
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)
        other.stop_agent()
        other.shim.cleanup()
    assert polls >= 10, f"{polls} polls in 3.5 s under 200 idle clients"
    assert scraped is not None and scraped[0] == 200 and "netshim_agent_polls_total" in scraped[2]
