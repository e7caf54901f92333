// The light run page's sidebar (/grpo/run): the visitor's runs (GET /grpo/runs), each with a tick box; a ticked run is
// overlaid on every chart of the page, one colour per run, its main line of each series drawn dotted, and follows
// live through its own /grpo/live stream (which checks that run as for any viewer). The ticked runs travel with the
// link (?overlay=id,id). The list is read again every RELIST_S while the page is shown, so runs launched since it
// opened join it. A folded section lists the spec fields in which the ticked runs differ from this run (GET
// /grpo/spec_diff; ?diff=1 opens it). Needs live.js (window.grpoLive): its charts, options and axis helpers.
(function () {
  "use strict";
  const LIST = "/grpo/runs";
  const DIFF = "/grpo/spec_diff";
  const RELIST_S = 15;  // the list is read again this often while the page is shown (runs launched since it opened)
  const STREAM = "/grpo/live";
  const MAX = 4;  // runs overlaid at once: each holds one of the visitor's live streams
  const COLORS = ["#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  const runs = {};  // run id -> { name, color, source, t0, lens: {series: points}, panels: {pid: [traces]} }
  let names = {};

  function el(id) { return document.getElementById(id); }
  function live() { return window.grpoLive; }

  function note(text) {
    const p = el("overlay-note");
    if (p && p.textContent !== text) p.textContent = text;
  }

  function ticked() { return Object.keys(runs); }

  function saveParam() {
    live().setParam("overlay", ticked().join(",") || null);
    showDiff();
  }

  // The spec fields in which the ticked runs differ from this run (GET /grpo/spec_diff), when its section is open.
  let diffSeq = 0;
  async function showDiff() {
    const box = el("spec-diff"), current = (live().state.opts || {}).run;
    if (!box || !box.open || !current) return;
    const p = box.querySelector("p"), body = box.querySelector("div");
    const seq = ++diffSeq;
    if (!ticked().length) {
      p.textContent = "Tick runs in the sidebar to list the spec fields in which they differ from this run.";
      body.replaceChildren();
      return;
    }
    let answer, data;
    try {
      answer = await fetch(DIFF + "?" + new URLSearchParams({ runs: [current, ...ticked()].join(",") }),
                           { credentials: "same-origin" });
      data = await answer.json();
    } catch (e) {
      if (seq === diffSeq) p.textContent = "Could not read the specs.";
      return;
    }
    if (seq !== diffSeq) return;  // a newer tick or untick is on its way
    if (!answer.ok) { p.textContent = data.error || "Could not read the specs."; body.replaceChildren(); return; }
    p.textContent = data.rows.length ? data.rows.length + " fields differ." : "The specs are the same.";
    const table = document.createElement("table");
    table.className = "grpo-samples-table";
    const head = table.appendChild(document.createElement("thead")).appendChild(document.createElement("tr"));
    for (const c of data.columns) head.appendChild(document.createElement("th")).textContent = c;
    const rows = table.appendChild(document.createElement("tbody"));
    for (const row of data.rows) {
      const tr = rows.appendChild(document.createElement("tr"));
      for (const v of row) tr.appendChild(document.createElement("td")).textContent = v;
    }
    body.replaceChildren(table);
  }

  // The line of each series a reader follows (the smoothed one, or the raw one without smoothing): the legend's.
  function mainLines(fig) {
    return (fig.data || []).filter(t => t.meta && t.meta.s && !t.meta.ov && t.showlegend !== false);
  }

  function overlayTrace(run, t) {
    const r = runs[run];
    return {
      type: "scatter", mode: "lines", x: Array.from(t.x || []), y: Array.from(t.y || []),
      name: r.name + " · " + t.name, legendgroup: "overlay:" + run, yaxis: t.yaxis,
      hovertemplate: t.hovertemplate, line: { color: r.color, width: 1.5, dash: "dot" },
      meta: { s: t.meta.s, r: t.meta.r, x: t.meta.x, ov: run },
    };
  }

  // Put every ticked run's traces of one panel on its chart (after the page's own traces), replacing what was there.
  function sync(pid) {
    const fig = live().state.figs[pid];
    if (!fig || !fig.gd || !fig.gd.isConnected || !window.Plotly) return;
    const mine = fig.gd.data.filter(t => !(t.meta && t.meta.ov));
    const extra = [];
    for (const run of ticked()) for (const t of runs[run].panels[pid] || []) extra.push(t);
    if (!extra.length && mine.length === fig.gd.data.length) return;
    // A panel this run has not logged says so ("not logged (yet)") until an overlaid run draws on it.
    const own = mine.some(t => t.meta && t.meta.s && t.x && t.x.length);
    const notes = (fig.layout && fig.layout.annotations) || [];
    const layout = own ? fig.gd.layout : Object.assign({}, fig.gd.layout, {
      annotations: extra.some(t => t.x.length) ? notes.filter(a => a.text !== live().GENERIC_NOTE) : notes });
    Plotly.react(fig.gd, mine.concat(extra.map(t => Object.assign({}, t, { x: t.x.slice(), y: t.y.slice() }))),
                 layout, live().CONFIG);
    fig.data = fig.gd.data;
  }

  // After the panels changed: a panel this run never logged is shown while an overlaid run has lines on it.
  function syncAll() {
    for (const pid of Object.keys(live().state.figs)) sync(pid);
    live().hideEmpty();
  }

  function onSnapshot(run, msg) {
    const r = runs[run];
    if (!r) return;
    r.t0 = msg.t0;
    r.lens = {};
    r.panels = {};
    for (const [pid, fig] of Object.entries(msg.panels || {})) {
      const lines = mainLines(fig);
      r.panels[pid] = lines.map(t => overlayTrace(run, t));
      for (const t of lines) r.lens[t.meta.s] = (t.x || []).length;
    }
    syncAll();
  }

  function onDelta(run, msg) {
    const r = runs[run], series = msg.series || {};
    if (!r || !Object.keys(series).length) return;
    const g = live();
    const touched = new Set();
    for (const [pid, traces] of Object.entries(r.panels)) {
      for (const t of traces) {
        const d = series[t.meta.s];
        if (!d) continue;
        t.x = t.x.slice(0, d.keep).concat(g.xs(d, t.meta, r.t0));
        t.y = t.y.slice(0, d.keep).concat(g.ys(d, t.meta.r));
        touched.add(pid);
      }
    }
    for (const [k, d] of Object.entries(series)) r.lens[k] = d.keep + d.step.length;
    for (const pid of touched) sync(pid);
    if (touched.size) live().hideEmpty();
  }

  function connect(run) {
    const o = live().state.opts;
    if (!o) return;
    const q = new URLSearchParams({ run, smoothing: String(o.smoothing), xaxis: o.xaxis, log_y: o.logY ? "1" : "0" });
    const source = new EventSource(STREAM + "?" + q.toString());
    runs[run].source = source;
    source.addEventListener("snapshot", e => onSnapshot(run, JSON.parse(e.data)));
    source.addEventListener("delta", e => onDelta(run, JSON.parse(e.data)));
    source.addEventListener("gone", () => { untick(run); note((names[run] || run) + " no longer exists."); });
    source.addEventListener("refused", e => { untick(run); note(JSON.parse(e.data).error); });
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED && runs[run] && runs[run].source === source) {
        untick(run);
        note("Could not follow " + (names[run] || run) + ".");
      }
    };
  }

  function tick(run) {
    if (runs[run]) return true;
    if (ticked().length >= MAX) {
      note("At most " + MAX + " runs overlaid at once (each follows its own live stream); untick one first.");
      return false;
    }
    const used = new Set(ticked().map(r => runs[r].color));
    runs[run] = { name: names[run] || run, color: COLORS.find(c => !used.has(c)) || COLORS[0], source: null,
                  t0: null, lens: {}, panels: {} };
    note("");
    connect(run);
    saveParam();
    return true;
  }

  function untick(run) {
    const r = runs[run];
    if (!r) return;
    if (r.source) r.source.close();
    delete runs[run];
    const box = document.querySelector('#overlay-runs input[data-run="' + CSS.escape(run) + '"]');
    if (box) box.checked = false;
    syncAll();
    saveParam();
  }

  function render(list, more) {
    const ul = el("overlay-runs");
    if (!ul) return;
    const current = (live().state.opts || {}).run;
    ul.textContent = "";
    for (const r of list) {
      const li = document.createElement("li");
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.dataset.run = r.id;
      const own = r.id === current;
      box.checked = own || !!runs[r.id];
      box.disabled = own;
      box.addEventListener("change", () => {
        if (box.checked) box.checked = tick(r.id);
        else untick(r.id);
      });
      const name = document.createElement("span");
      name.textContent = r.name + (own ? " (this run)" : "");
      name.title = r.id;
      const status = document.createElement("small");
      status.textContent = " " + r.status;
      label.append(box, name, status);
      li.appendChild(label);
      ul.appendChild(li);
    }
    if (!list.length) note("No runs to list.");
    else if (more) note("The newest " + list.length + " runs are listed; open older ones by their link.");
  }

  async function load(first) {
    let answer;
    try {
      answer = await fetch(LIST, { credentials: "same-origin" });
    } catch (e) {
      note("Could not list the runs.");
      return;
    }
    if (answer.status === 401) { note("Sign in to list your runs."); return; }
    if (!answer.ok) { note("Could not list the runs."); return; }
    const body = await answer.json();
    names = Object.fromEntries(body.runs.map(r => [r.id, r.name]));
    if (first) {
      const wanted = (new URLSearchParams(live().initialSearch).get("overlay") || "").split(",").filter(Boolean);
      const current = (live().state.opts || {}).run;
      for (const run of wanted) if (run !== current && names[run]) tick(run);
    }
    for (const run of ticked()) if (names[run]) runs[run].name = names[run];
    const ul = el("overlay-runs");
    const listed = JSON.stringify(body.runs);
    if (!ul || ul.dataset.listed !== listed) {  // re-rendered only when it changed (a tick box keeps its focus)
      render(body.runs, body.more);
      if (ul) ul.dataset.listed = listed;
    }
  }

  function start() {
    if (!window.grpoLive) { setTimeout(start, 50); return; }
    live().onDrawn(pid => sync(pid));  // the page's own redraw of a panel (a snapshot) drops what was added to it
    load(true);
    // Runs launched (or renamed, or finished) since the page opened join the list; not while the tab is hidden.
    setInterval(() => { if (document.visibilityState === "visible") load(false); }, RELIST_S * 1000);
    const box = el("spec-diff");
    if (box) box.addEventListener("toggle", () => { live().setParam("diff", box.open ? "1" : null); showDiff(); });
    if (box && new URLSearchParams(live().initialSearch).get("diff") === "1") box.open = true;
  }

  start();
  window.grpoOverlay = { tick, untick, runs };
})();
