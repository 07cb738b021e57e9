#!/usr/bin/env python3
"""render_svg.py -- draw the dashboard's panels from a Prometheus, as one
SVG (Grafana itself is not in Debian; this is the picture in the README).

  render_svg.py DASHBOARD.json PROMETHEUS_URL SECONDS OUT.svg [RATE_INTERVAL]

Each panel's queries run over the last SECONDS (query_range, a point every
SECONDS/120 s); each series is a line, scaled to its panel."""
import json
import sys
import time
import urllib.parse
import urllib.request
from xml.sax.saxutils import escape

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
PW, PH, PAD = 560, 260, 30


def query_range(url, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}", timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def legend(fmt, metric):
    out = fmt
    for k, v in metric.items():
        out = out.replace("{{" + k + "}}", v)
    return out


def panel_series(dash, url, seconds, rate):
    end = time.time()
    start, step = end - seconds, max(1.0, seconds / 120)
    for p in dash["panels"]:
        lines = []
        for t in p["targets"]:
            expr = t["expr"].replace("$__rate_interval", rate)
            for r in query_range(url, expr, start, end, step):
                pts = [(float(ts), float(v)) for ts, v in r["values"] if v not in ("NaN", "+Inf", "-Inf")]
                if pts:
                    lines.append((legend(t.get("legendFormat", ""), r["metric"]), pts))
        yield p, lines, start, end


def draw(dash, url, seconds, rate):
    cells = []
    for i, (p, lines, start, end) in enumerate(panel_series(dash, url, seconds, rate)):
        x0, y0 = (i % 2) * (PW + 20) + 10, (i // 2) * (PH + 20) + 10
        ymax = max([v for _, pts in lines for _, v in pts] + [1e-9]) * 1.1
        cells.append(f'<rect x="{x0}" y="{y0}" width="{PW}" height="{PH}" fill="#111217" stroke="#2c3235"/>')
        cells.append(f'<text x="{x0 + 8}" y="{y0 + 18}" fill="#d8d9da" font-size="13">{escape(p["title"])}</text>')
        cells.append(f'<text x="{x0 + 8}" y="{y0 + PH - 8}" fill="#8e8e8e" font-size="10">'
                     f'0 .. {ymax / 1.1:.3g}, last {int(seconds)} s</text>')
        for k, (name, pts) in enumerate(lines[:8]):
            c = COLOURS[k % len(COLOURS)]
            path = " ".join(f"{x0 + PAD + (t - start) / (end - start) * (PW - 2 * PAD):.1f},"
                            f"{y0 + PH - PAD - v / ymax * (PH - 2 * PAD - 20):.1f}" for t, v in pts)
            cells.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.8" points="{path}"/>')
            cells.append(f'<text x="{x0 + PW - 250}" y="{y0 + 36 + 13 * k}" fill="{c}" font-size="10">'
                         f'{escape(name[:44])}</text>')
    rows = (len(dash["panels"]) + 1) // 2
    w, h = 2 * (PW + 20), rows * (PH + 20)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif">'
            f'<rect width="{w}" height="{h}" fill="#0b0c0e"/>' + "".join(cells) + "</svg>\n")


def main():
    dash = json.load(open(sys.argv[1]))
    svg = draw(dash, sys.argv[2].rstrip("/"), float(sys.argv[3]), sys.argv[5] if len(sys.argv) > 5 else "1m")
    open(sys.argv[4], "w").write(svg)


if __name__ == "__main__":
    main()
