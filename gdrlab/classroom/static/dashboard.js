// gdrlab class view: the instructor's dashboard. Listens to api/events (server-sent events) and
// redraws without reloading; where the stream cannot be had (an old browser, the server's limit of
// live dashboards) it polls api/state once a second instead. Each point is coloured by the model's
// verdict for that learner's machine, the likeliest cause in its hover text. Every learner-supplied string reaches the page through textContent (never
// innerHTML), and reaches plotly (whose labels understand a little HTML) with <, > and & escaped.
"use strict";
(function () {
  const POLL_MS = 1000;
  const MACHINE_COLUMNS = 8;
  let since = 0;
  const rows = new Map();        // row id -> row
  const plots = new Map();       // path -> div
  let recorded = {};
  let models = {};               // path -> [{label, wire, size, bw_gbps, lat_p50_us}]
  let polling = false;
  const COLORS = {};             // verdict -> colour, from the legend in the page
  let lastMachines = "";
  let lastProgress = "";
  let lastLearners = "";

  function plotText(s) {
    return String(s === null || s === undefined ? "" : s)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function fillTable(id, lines) {
    const tbody = document.querySelector("#" + id + " tbody");
    const fresh = document.createElement("tbody");
    for (const cells of lines) {
      const tr = document.createElement("tr");
      for (const c of cells) {
        const td = document.createElement("td");
        td.textContent = c === null || c === undefined ? "" : String(c);
        tr.appendChild(td);
      }
      fresh.appendChild(tr);
    }
    tbody.replaceWith(fresh);
  }

  function gpuText(g) {
    const cur = g.pcie_gen ? "Gen" + g.pcie_gen + " x" + g.pcie_width : "?";
    const max = g.pcie_max_gen ? "Gen" + g.pcie_max_gen + " x" + g.pcie_max_width : "?";
    const numa = g.numa_node === null || g.numa_node === undefined ? "?" : g.numa_node;
    return (g.name || "?") + " (" + cur + " of " + max + ", NUMA " + numa + ")";
  }

  function machineCells(m) {  // the same cells as app.machine_cells
    const gpus = (m.gpus || []).map(gpuText).join("; ") || "none";
    const nics = (m.nics || []).map(n => n.name + " (" + (n.link_layer || "?") + ", " + (n.state || "?") + ")")
      .join("; ") || "none";
    const paths = Object.keys(m.paths || {}).filter(k => m.paths[k]).join(" ") || "none";
    const gdr = (m.gdr || []).map(d => d.gpu + "-" + d.nic + ": " + d.code + " " + (d.use_gdr ? "GDR" : "no GDR"))
      .join("; ") || "no GPU-NIC pair";
    const peer = (m.peer_memory || "none") + ", dma-buf " + (m.dmabuf_usable ? "yes" : "no");
    return [m.learner, String(m.fingerprint).slice(0, 8), m.host, gpus, nics, peer, paths, gdr];
  }

  function plotFor(path) {
    let div = plots.get(path);
    if (!div) {
      div = document.createElement("div");
      div.className = "plot";
      div.dataset.path = path;
      const sorted = Array.from(plots.keys()).concat([path]).sort();
      const after = sorted.indexOf(path) + 1 < sorted.length ? plots.get(sorted[sorted.indexOf(path) + 1]) : null;
      document.getElementById("plots").insertBefore(div, after);
      plots.set(path, div);
    }
    return div;
  }

  function redraw() {
    const metric = document.getElementById("metric").value;
    const byPath = new Map();
    for (const r of rows.values()) {
      if (r[metric] === null || r[metric] === undefined) continue;
      if (!byPath.has(r.path)) byPath.set(r.path, new Map());
      const key = r.learner_id + "|" + r.fingerprint;
      const curves = byPath.get(r.path);
      if (!curves.has(key)) curves.set(key, {learner: r.learner, learner_id: r.learner_id, fp: r.fingerprint,
                                             pts: new Map()});
      curves.get(key).pts.set(r.size, r);  // a re-measured size replaces the earlier point
    }
    const unit = metric === "bw_gbps" ? " GB/s" : " us";
    const modelKey = metric === "bw_gbps" ? "model_bw_gbps" : "model_lat_us";
    for (const [path, curves] of byPath) {
      const traces = [];
      const ref = recorded[path];
      if (ref) {
        traces.push({x: ref.size, y: ref[metric], mode: "lines", name: plotText(ref.label),
                     line: {dash: "dash", color: "#999"}, hoverinfo: "x+y+name", meta: {kind: "recorded"}});
      }
      for (const m of models[path] || []) {
        traces.push({x: m.size, y: m[metric], mode: "lines", name: plotText(m.label),
                     line: {dash: "dot", color: "#555", width: 1.5}, hoverinfo: "x+y+name", meta: {kind: "model"}});
      }
      for (const c of curves.values()) {
        const pts = Array.from(c.pts.values()).sort((a, b) => a.size - b.size);
        const name = plotText(c.learner) + " (" + plotText(String(c.fp).slice(0, 8)) + ")";
        traces.push({x: pts.map(p => p.size), y: pts.map(p => p[metric]), mode: "lines+markers", name: name,
                     marker: {size: 9, color: pts.map(p => COLORS[p.verdict] || COLORS["not modelled"] || "#aaa"),
                              line: {width: 1, color: "#333"}},
                     meta: {kind: "learner", learner_id: c.learner_id, fingerprint: c.fp,
                            verdicts: pts.map(p => p.verdict || "not modelled")},
                     text: pts.map(p => plotText(c.learner) + "<br><b>" + plotText(p.verdict || "not modelled") + "</b>" +
                                        (p[modelKey] !== null && p[modelKey] !== undefined
                                          ? " (model " + Number(p[modelKey]).toPrecision(3) + unit + ")" : "") +
                                        (p.cause ? "<br>likeliest cause: " + plotText(p.cause) : "") +
                                        "<br>" + plotText(p.source) + (p.lab ? "<br>lab " + plotText(p.lab) : "")),
                     hovertemplate: "%{x:,d} B: %{y:.4g}" + unit + "<br>%{text}<extra></extra>"});
      }
      const layout = {title: {text: plotText(path)}, height: 360, margin: {t: 40, l: 60, r: 10, b: 50},
                      xaxis: {type: "log", title: {text: "message size (bytes)"}},
                      yaxis: {type: metric === "lat_p50_us" ? "log" : "linear",
                              title: {text: metric === "bw_gbps" ? "GB/s" : "us (p50)"}},
                      legend: {orientation: "v"}, hovermode: "closest"};
      window.Plotly.react(plotFor(path), traces, layout, {displaylogo: false, responsive: true});
    }
  }

  function apply(state) {
    for (const r of state.rows) rows.set(r.id, r);
    since = Math.max(since, state.max_id);
    const names = new Map(state.learners.map(l => [l.id, l.name]));
    const machines = JSON.stringify(state.machines);
    if (machines !== lastMachines) {
      fillTable("machines", state.machines.map(machineCells));
      lastMachines = machines;
    }
    const progress = JSON.stringify(state.progress);
    if (progress !== lastProgress) {
      fillTable("progress", state.progress.map(p => [names.get(p.learner_id), p.lab || "(none)", p.frames, p.rows]));
      lastProgress = progress;
    }
    const learners = JSON.stringify(state.learners);
    if (learners !== lastLearners) {
      fillTable("learners", state.learners.map(l => [l.id, l.name, l.joined, l.submissions]));
      lastLearners = learners;
    }
    const c = state.counts;
    document.getElementById("status").textContent =
      c.learners + " learners, " + c.machines + " machines, " + c.rows + " result rows (live" +
      (polling ? ", polling" : "") + ")";
    document.body.dataset.rows = String(rows.size);
    document.body.dataset.live = polling ? "poll" : "sse";
    if (state.models) models = state.models;
    if (state.rows.length || state.models) redraw();
  }

  async function poll() {
    try {
      const resp = await fetch("api/state?since=" + since, {credentials: "same-origin", cache: "no-store"});
      if (resp.status === 401) { window.location.reload(); return; }
      if (resp.ok) apply(await resp.json());
    } catch (e) {
      document.getElementById("status").textContent = "server not reachable, retrying";
    }
    window.setTimeout(poll, POLL_MS);
  }

  function startPolling() {
    if (polling) return;
    polling = true;
    document.body.dataset.live = "poll";
    poll();
  }

  function listen() {  // server-sent events; polling where they cannot be had
    if (!window.EventSource) { startPolling(); return; }
    const es = new EventSource("api/events?since=" + since);
    es.addEventListener("state", ev => apply(JSON.parse(ev.data)));
    es.addEventListener("bye", () => {  // the server is stopping: try again shortly
      es.close();
      document.getElementById("status").textContent = "server stopped, reconnecting";
      window.setTimeout(listen, 3000);
    });
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) startPolling();  // refused (limit, login): poll instead
      else document.getElementById("status").textContent = "server not reachable, retrying";
    };
  }

  async function start() {
    try {
      const resp = await fetch("api/recorded", {credentials: "same-origin"});
      if (resp.ok) recorded = await resp.json();
    } catch (e) { /* no overlay */ }
    for (const li of document.querySelectorAll("#verdict-legend [data-verdict]")) {
      COLORS[li.dataset.verdict] = li.dataset.color;
    }
    document.getElementById("metric").addEventListener("change", redraw);
    listen();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
