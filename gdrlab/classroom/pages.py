"""The class view's HTML: the login form and the dashboard page (its first render; dashboard.js
keeps it current). Every string goes through :func:`html.escape`."""
from __future__ import annotations

import html
from typing import Any

from .store import Store

__all__ = ["login_page", "dashboard_page", "machine_cells", "MACHINE_HEADERS"]


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _page(title: str, body: str, script: bool = False) -> str:
    scripts = ('<script src="static/plotly.min.js"></script>\n<script src="static/dashboard.js"></script>\n'
               if script else "")
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<link rel="stylesheet" href="static/dashboard.css">\n{scripts}</head>\n<body>\n{body}\n</body></html>\n')


def login_page(error: str | None = None) -> str:
    msg = f'<p class="error" id="login-error">{_e(error)}</p>' if error else ""
    return _page("gdrlab class view: log in", f"""<main class="login"><h1>gdrlab class view</h1>{msg}
<form method="post" action="login"><label>Instructor token <input type="password" name="token" id="token"
autocomplete="current-password" autofocus></label> <button type="submit" id="login">Open the dashboard</button></form>
<p>The token is the one <code>gdrlab class serve</code> printed (or its <code>--token-file</code>).</p></main>""")


def machine_cells(m: dict[str, Any]) -> list[str]:
    """The machine table's cells as plain text (the page escapes them; dashboard.js builds the same)."""
    def gpu(g: dict[str, Any]) -> str:
        cur = f"Gen{g.get('pcie_gen')} x{g.get('pcie_width')}" if g.get("pcie_gen") else "?"
        mx = f"Gen{g.get('pcie_max_gen')} x{g.get('pcie_max_width')}" if g.get("pcie_max_gen") else "?"
        return f"{g.get('name') or '?'} ({cur} of {mx}, NUMA {g.get('numa_node') if g.get('numa_node') is not None else '?'})"
    gpus = "; ".join(gpu(g) for g in m.get("gpus") or []) or "none"
    nics = "; ".join(f"{n.get('name')} ({n.get('link_layer') or '?'}, {n.get('state') or '?'})"
                     for n in m.get("nics") or []) or "none"
    paths = " ".join(k for k, v in (m.get("paths") or {}).items() if v) or "none"
    gdr = "; ".join(f"{d.get('gpu')}-{d.get('nic')}: {d.get('code')} {'GDR' if d.get('use_gdr') else 'no GDR'}"
                    for d in m.get("gdr") or []) or "no GPU-NIC pair"
    peer = m.get("peer_memory") or "none"
    peer += ", dma-buf " + ("yes" if m.get("dmabuf_usable") else "no")
    return [str(m.get("learner")), str(m.get("fingerprint"))[:8], str(m.get("host")), gpus, nics, peer, paths, gdr]


#: The colour of each verdict of :func:`gdrlab.model.explain_rows` on the dashboard (colour-blind
#: safe: the Okabe-Ito palette; "low", the one to act on, is the strongest).
VERDICT_COLORS = {"normal": "#009E73", "low": "#D55E00", "high": "#0072B2", "not comparable": "#CC79A7",
                  "not modelled": "#999999"}
VERDICT_MEANING = {
    "normal": "within 25 % of the model of that learner's machine",
    "low": "slower than the model by more than 25 %: the hover names the likeliest cause",
    "high": "faster than the model by more than 25 % (a model too pessimistic, or a measurement to check)",
    "not comparable": "a wire path measured against a local peer over loopback, or recorded or modelled data "
                      "(no measurement of this machine)",
    "not modelled": "no doctor report from that machine yet, or a path the model does not cover"}


def verdict_legend() -> str:
    items = "".join(f'<li data-verdict="{_e(v)}" data-color="{_e(c)}"><span class="swatch" style="background:{_e(c)}">'
                    f'</span> <b>{_e(v)}</b>: {_e(VERDICT_MEANING[v])}</li>' for v, c in VERDICT_COLORS.items())
    return f'<ul id="verdict-legend">{items}</ul>'


MACHINE_HEADERS = ["learner", "machine", "host", "GPUs (PCIe now of max, NUMA)", "RDMA NICs", "peer memory",
                   "paths that run", "GDR (NCCL's rule)"]


def dashboard_page(store: Store) -> str:
    machines = store.machines()
    head = "".join(f"<th>{_e(h)}</th>" for h in MACHINE_HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in machine_cells(m)) + "</tr>" for m in machines)
    learners = store.learners()
    counts = store.counts()
    return _page("gdrlab class view", f"""<header><h1>gdrlab class view</h1>
<p id="status">{_e(counts['learners'])} learners, {_e(counts['machines'])} machines, {_e(counts['rows'])} result rows
</p><form method="post" action="logout"><button type="submit">log out</button></form>
<a href="export.csv" id="export">export CSV</a> <a href="export.csv?anonymise=1">export CSV (anonymised)</a>
<a href="export.parquet?anonymise=1" id="export-parquet">export Parquet (anonymised)</a></header>
<section><h2>Machines</h2><table id="machines"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>
<section><h2>Sweeps per path</h2><p>Each learner's machine is one curve; the dashed grey curve is the recorded
H200 sweep shipped with gdrlab, the dotted dark curves the model of each kind of machine in the room. Each point
is coloured by "is this number normal": the model's prediction for that learner's machine (as
<code>gdrlab bench --explain</code> gives it there).</p>{verdict_legend()}<p><label>metric <select id="metric"><option value="bw_gbps">bandwidth (GB/s)</option>
<option value="lat_p50_us">latency p50 (us)</option></select></label></p><div id="plots"></div></section>
<section><h2>Progress per lab</h2><table id="progress"><thead><tr><th>learner</th><th>lab</th><th>frames</th>
<th>rows</th></tr></thead><tbody></tbody></table></section>
<section><h2>Learners</h2><table id="learners"><thead><tr><th>#</th><th>name</th><th>joined</th><th>submissions</th>
</tr></thead><tbody>{"".join(f"<tr><td>{_e(x['id'])}</td><td>{_e(x['name'])}</td><td>{_e(x['joined'])}</td><td>{_e(x['submissions'])}</td></tr>" for x in learners)}</tbody></table></section>
""", script=True)
