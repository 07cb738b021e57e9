"""The Debian packages (issue 21): built with `make deb`, installed with
dpkg -i, used through their installed paths alone on curl against a
misbehaving local server, and removed leaving nothing behind."""
import os
import shutil
import subprocess
import time

import pytest

from conftest import NEGATIVE, ROOT, base_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("dpkg-buildpackage"),
                                reason="needs root and dpkg-dev (tools/install-deps.sh installs it)")


def sh(*args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.shim
def test_the_packages_install_govern_curl_and_remove_cleanly(shim, server, tmp_path):
    for p in ("netshim", "netshim-agent"):
        assert sh("dpkg-query", "-W", p).returncode != 0, f"{p} is installed already: this test installs its own"
    r = sh("make", "-C", ROOT, "deb")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    debs = sorted(str(ROOT / "build" / "deb" / f) for f in os.listdir(ROOT / "build" / "deb")
                  if f.endswith(".deb") and "dbgsym" not in f)
    lint = sh("lintian", "--fail-on", "error", *debs)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    try:
        r = sh("dpkg", "-i", *debs)
        assert r.returncode == 0, r.stdout + r.stderr
        files = {p: [l for l in sh("dpkg", "-L", p).stdout.splitlines() if os.path.isfile(l)]
                 for p in ("netshim", "netshim-agent")}
        lib = [f for f in files["netshim"] if f.endswith("/netshim/libnetshim.so")]
        assert lib and lib[0].startswith("/usr/lib/") and "/usr/bin/shimrun" in files["netshim"], files
        assert "/usr/bin/netshim-agent" in files["netshim-agent"] and \
            "/lib/systemd/system/netshim-agent.service" in files["netshim-agent"], files
        # installed paths alone: /usr/bin/shimrun finds its library, curl's
        # reads meet the deadline, the breaker opens, shimctl says so
        srv = server("silent")
        pol = tmp_path / "p.conf"
        pol.write_text("[defaults]\nread_timeout = 500ms\nfailure_threshold = 3\n")
        env = base_env(shim.table)
        for i in range(4):
            t0 = time.monotonic()
            # (with the shim disabled, the negative control, curl would wait for ever)
            c = subprocess.run(["/usr/bin/shimrun", "--policy", str(pol), "--", "curl", "-sS", "-o", "/dev/null",
                                srv.url], capture_output=True, text=True, env=env, timeout=3 if NEGATIVE else 60)
            took = time.monotonic() - t0
            if i < 3:
                assert c.returncode == 56 and "timed out" in c.stderr and 0.45 <= took <= 5, (c.returncode, c.stderr)
            else:
                assert c.returncode == 7 and took < 2, (c.returncode, c.stderr)   # refused by the open breaker
        st = sh("/usr/bin/shimctl", "--table", shim.table, "status", srv.dest, env=env)
        assert st.returncode == 0 and " open " in st.stdout, st.stdout + st.stderr
        assert sh("man", "-w", "shimctl").stdout.strip() == "/usr/share/man/man1/shimctl.1.gz"
        for f in ("netshim-rules.yml", "netshim-rules.test.yml", "netshim.json"):   # alerting and the dashboard
            assert f"/usr/share/netshim-agent/{f}" in files["netshim-agent"], files["netshim-agent"]
        r = sh("dpkg", "-r", "netshim-agent", "netshim")
        assert r.returncode == 0, r.stdout + r.stderr
        left = [f for fs in files.values() for f in fs if os.path.exists(f) and not f.startswith("/etc/")]
        assert left == [], left
        assert os.path.exists("/etc/default/netshim-agent")   # a conffile: kept by -r ...
        r = sh("dpkg", "-P", "netshim-agent", "netshim")
        assert r.returncode == 0 and not os.path.exists("/etc/default/netshim-agent")   # ... gone with -P
    finally:
        sh("dpkg", "-P", "netshim-agent", "netshim")
