// The live Run detail page: one EventSource per open run (/grpo/live, see grpo_dashboard/ui/stream.py). A snapshot
// draws every panel with Plotly.react; each delta appends its series' new points with Plotly.extendTraces (or, when
// the display reduction rewrote a series' tail, replaces that tail). Also keeps ?run= and ?tab= in the URL.
(function () {
  "use strict";
  const STREAM = "/grpo/live";
  // No upload to Plotly's cloud; on a phone no toolbar over the chart titles (pinch and tap still work).
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"],
                   showSendToCloud: false, showEditInChartStudio: false,
                   displayModeBar: window.matchMedia && window.matchMedia("(max-width: 700px)").matches ? false : "hover" };
  const state = { source: null, opts: null, t0: null, lens: {}, figs: {}, retry: 0, received: 0, loaded: false,
                  texts: {} };
  // The query string the page was opened with: Gradio selects its first tab while mounting, before the app's
  // load handler has read ?run= and ?tab=.
  const initialSearch = window.location.search;

  function el(id) { return document.getElementById(id); }

  // A trace of this run's logged series: not the forecast's (meta is a string) nor another run's overlaid on the
  // chart (meta.ov: static/overlay.js, which keeps those traces itself).
  function own(t) { return !!(t.meta && t.meta.s && !t.meta.ov); }

  const drawnHooks = [];  // called with (panel id, figure) after a panel is drawn afresh (the overlay re-adds to it)
  const samplesHooks = [];  // called with (first) when the run's samples file size is first known or changes

  function setParam(name, value) {
    const url = new URL(window.location.href);
    if (value === null || value === undefined || value === "") url.searchParams.delete(name);
    else url.searchParams.set(name, value);
    window.history.replaceState(null, "", url.toString());
  }

  // plotly.js may still be loading (the light page fetches it async, so the stream opens first): run `fn` once it is.
  function whenPlotly(fn) {
    if (window.Plotly) return fn();
    setTimeout(() => whenPlotly(fn), 10);
  }

  function graph(pid) {
    const box = el("plot-" + pid);
    if (!box) return null;
    let gd = box.querySelector(".grpo-gd");
    if (!gd) {
      gd = document.createElement("div");
      gd.className = "grpo-gd";
      box.appendChild(gd);
    }
    return gd;
  }

  // A trace may name its own axis (meta.x): the System panel's samples are drawn against time on every x axis.
  function xs(d, meta, t0) {
    const x = (meta && meta.x) || state.opts.xaxis;
    const zero = t0 === undefined ? state.t0 : t0;
    if (x === "step") return d.step;
    if (x === "relative time") return d.time.map(t => (t === null ? null : (t - (zero || 0)) / 60));
    return d.time.map(t => (t === null ? null : new Date(t * 1000).toISOString().replace("Z", "")));
  }

  function ys(d, role) {
    let y;
    if (role === "value") y = d.value;
    else if (role === "smooth") y = d.smooth;
    else {
      const sign = role === "lo" ? -1 : 1;
      const band = d.band || [];
      y = d.smooth.map((m, i) => (m === null || band[i] === null || band[i] === undefined ? null : m + sign * band[i]));
    }
    if (state.opts.logY) y = y.map(v => (v !== null && v > 0 ? v : null));
    return y;
  }

  // The figures are kept here (state.figs) and drawn into their containers when those exist: Gradio renders a
  // tab's content only once it is shown. A drawn figure's data is the graph's own (Plotly keeps the objects).
  function draw(pid) {
    const fig = state.figs[pid], box = el("plot-" + pid);
    if (!fig || !box) return false;
    const gd = graph(pid);
    const ph = box.querySelector(".grpo-placeholder");
    if (ph) ph.remove();
    // The box is as tall as the figure (a System panel with several GPUs is taller): nothing runs under the next one.
    const tall = fig.layout && fig.layout.height ? fig.layout.height + "px" : "";
    if (gd.style.height !== tall) gd.style.height = tall;
    Plotly.react(gd, fig.data, fig.layout, CONFIG);
    fig.gd = gd;
    fig.data = gd.data;
    for (const hook of drawnHooks) hook(pid, fig);
    return true;
  }

  function drawMissing() {
    paintTexts();
    if (!window.Plotly || state.holding) return;
    const missing = Object.keys(state.figs).filter(pid => !state.figs[pid].gd || !state.figs[pid].gd.isConnected);
    if (missing.length) drawInTurn(missing);
    else markDrawn();
  }

  // The reward chart first, on its own, so that it is painted before the others are built; the rest a frame later
  // (drawing every panel at once kept the first chart off the screen until all were built).
  function drawInTurn(ids) {
    const epoch = state.snapshots;
    const first = ids.includes("reward") ? ["reward"] : ids.slice(0, 1);
    state.holding = true;
    for (const pid of first) draw(pid);
    markDrawn();
    requestAnimationFrame(() => setTimeout(() => {
      if (state.snapshots !== epoch) return;  // a newer snapshot draws everything itself
      state.holding = false;
      for (const pid of ids) {
        const fig = state.figs[pid];
        if (!first.includes(pid) && fig && (!fig.gd || !fig.gd.isConnected)) draw(pid);
      }
      markDrawn();
    }, 0));
  }

  function drawSnapshot(msg) {
    state.queue = null;
    state.t0 = msg.t0;
    state.lens = {};
    state.figs = {};
    for (const [pid, fig] of Object.entries(msg.panels)) {
      state.figs[pid] = { data: fig.data, layout: fig.layout, gd: null };
      for (const t of fig.data) if (own(t)) state.lens[t.meta.s] = (t.x || []).length;
    }
    state.snapshots = (state.snapshots || 0) + 1;
    whenPlotly(() => drawInTurn(Object.keys(state.figs)));
    applyText(msg);
  }

  // Deltas that arrive while the page is busy are merged and drawn together: a slow or starved page redraws once per
  // turn of its event loop, not once per delta, so it never falls further and further behind.
  const FIELDS = ["step", "time", "value", "smooth", "band"];

  function merge(a, b) {
    if (!a || b.keep < a.keep) return b;
    const cut = b.keep - a.keep, out = { keep: a.keep };
    for (const f of FIELDS) {
      if (a[f] === undefined && b[f] === undefined) continue;
      out[f] = (a[f] || []).slice(0, cut).concat(b[f] || []);
    }
    return out;
  }

  function queueDelta(msg) {
    const q = state.queue || (state.queue = { series: {}, texts: [] });
    for (const [k, d] of Object.entries(msg.series || {})) q.series[k] = merge(q.series[k], d);
    q.texts.push(msg);
    if (!state.flushTimer) state.flushTimer = setTimeout(flush, 0);
  }

  function flush() {
    state.flushTimer = null;
    const q = state.queue;
    state.queue = null;
    if (!q) return;
    applyDelta({ series: q.series });
    for (const msg of q.texts) applyText(msg);
  }

  function applyDelta(msg) {
    const series = msg.series || {};
    const keys = Object.keys(series);
    if (keys.length) {
      whenPlotly(() => {
        for (const fig of Object.values(state.figs)) {
          const drawn = fig.gd && fig.gd.isConnected;
          const ext = { x: [], y: [] }, idx = [];
          let rewritten = false;
          fig.data.forEach((t, i) => {
            const d = own(t) && series[t.meta.s];
            if (!d) return;
            const have = state.lens[t.meta.s] || 0;
            if (d.keep === have && drawn) {
              ext.x.push(xs(d, t.meta));
              ext.y.push(ys(d, t.meta.r));
              idx.push(i);
            } else {
              t.x = Array.from(t.x || []).slice(0, d.keep).concat(xs(d, t.meta));
              t.y = Array.from(t.y || []).slice(0, d.keep).concat(ys(d, t.meta.r));
              rewritten = true;
            }
          });
          if (!drawn) continue;
          if (idx.length) Plotly.extendTraces(fig.gd, ext, idx);
          if (rewritten) {
            fig.layout.datarevision = (fig.layout.datarevision || 0) + 1;
            Plotly.react(fig.gd, fig.gd.data, fig.layout, CONFIG);
          }
          fig.data = fig.gd.data;
        }
        for (const k of keys) state.lens[k] = series[k].keep + series[k].step.length;
        markDrawn();
      });
    }
  }

  // Panels a run cannot fill (agent tools, async rollouts on an ordinary run) are hidden once the run logs, with
  // one line naming them; a panel keeps its place when it has points or a note (KL not logged: beta is 0), and
  // comes back as soon as a delta brings it points.
  function points(fig) {
    const data = (fig.gd && fig.gd.data) || fig.data || [];
    return Math.max(0, ...data.filter(own).map(t => (t.x ? t.x.length : 0)));
  }

  const GENERIC_NOTE = "not logged (yet)";  // views/charts.py's note of a panel with no series

  function hideEmpty() {
    const reward = state.figs.reward;
    if (!reward || !points(reward)) return;
    const hidden = [];
    document.querySelectorAll("#live-charts .grpo-panel").forEach(box => {
      const pid = box.id.replace(/^plot-/, "");
      const fig = state.figs[pid];
      // A note that says why (KL with beta 0, no system samples) keeps its panel; the generic one does not.
      const notes = fig && fig.layout && (fig.layout.annotations || []).some(a => a.text && a.text !== GENERIC_NOTE);
      // A run overlaid from the light page's sidebar (static/overlay.js) that logged this panel shows it too.
      const overlaid = fig && fig.gd && (fig.gd.data || []).some(t => t.meta && t.meta.ov && t.x && t.x.length);
      const empty = !fig || (!points(fig) && !notes && !overlaid);
      if (box.style.display !== (empty ? "none" : "")) {  // (only on a change: no mutation loop)
        box.style.display = empty ? "none" : "";
        // A chart drawn while its box was hidden has no width yet.
        if (!empty && fig && fig.gd && window.Plotly) requestAnimationFrame(() => Plotly.Plots.resize(fig.gd));
      }
      if (empty) hidden.push(box.dataset.title || pid);
    });
    let line = el("live-hidden");
    if (!line) {
      const grid = el("live-charts");
      if (!grid) return;
      line = document.createElement("p");
      line.id = "live-hidden";
      line.className = "grpo-hidden-note";
      const anchor = grid.closest(".grpo-main") || grid;  // the light page: below its charts-and-sidebar block
      anchor.parentNode.insertBefore(line, anchor.nextSibling);
    }
    const text = hidden.length ? "Not shown, nothing logged for them by this run: " + hidden.join(", ") + "." : "";
    if (line.textContent !== text) line.textContent = text;
  }

  function markDrawn() {
    hideEmpty();
    const gd = document.querySelector("#plot-reward .js-plotly-plot");
    // Logged series only (traces with a series in meta): the forecast's fit is drawn to max_steps at once.
    const logged = gd && gd.data ? gd.data.filter(own) : [];
    const n = Math.max(0, ...logged.map(t => (t.x ? t.x.length : 0)));
    document.body.dataset.grpoPoints = String(n);
    // The newest step the reward chart shows (what a latency measurement compares with the record's write time).
    const last = Math.max(-1, ...logged.map(t => (t.x && t.x.length ? Number(t.x[t.x.length - 1]) : -1)));
    document.body.dataset.grpoStep = String(last);
    document.body.dataset.grpoEvents = String(state.received);
  }

  // The last status and findings are kept and written again whenever their boxes are new or were emptied: Gradio
  // renders a tab's content when it is first shown (and again on re-renders), often after the only message of a
  // finished run arrived. A box remembers what was written into it (a property, not its normalised innerHTML).
  function paint(id, html) {
    const box = el(id);
    if (!box || html === undefined || html === null) return;
    if (box.grpoHtml === html && box.innerHTML) return;
    box.innerHTML = html;
    box.grpoHtml = html;
  }

  function paintTexts() {
    const light = el("light-link"), run = state.opts && state.opts.run;
    const href = "/grpo/run" + (run ? "?run=" + encodeURIComponent(run) : "");
    if (light && light.getAttribute("href") !== href) light.setAttribute("href", href);
    paint("live-status", state.texts.status);
    paint("live-findings", state.texts.findings);
    const cancel = document.querySelector("#cancel-btn");
    if (cancel && state.texts.active !== undefined) cancel.disabled = !state.texts.active;
  }

  function statusText(text) {
    const div = document.createElement("div");
    div.textContent = text;
    state.texts.status = div.innerHTML;
    paintTexts();
  }

  function applyText(msg) {
    if (msg.status) {
      state.texts.status = msg.status.html;
      state.texts.active = msg.status.active;
    }
    if (msg.findings !== null && msg.findings !== undefined) state.texts.findings = msg.findings;
    paintTexts();
    if (msg.log !== null && msg.log !== undefined) {
      const pre = el("live-log");
      if (pre) {
        const atEnd = !pre.dataset.filled || pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
        pre.textContent = msg.log;
        pre.dataset.filled = "1";
        if (atEnd) pre.scrollTop = pre.scrollHeight;
      }
    }
    if (msg.samples !== null && msg.samples !== undefined && state.samples !== msg.samples) {
      const first = state.samples === undefined;
      state.samples = msg.samples;
      const follow = document.querySelector("#samples-follow input");
      const refresh = document.querySelector("#samples-refresh");
      if (!first && refresh && (!follow || follow.checked)) refresh.click();
      for (const hook of samplesHooks) hook(first);
    }
  }

  function placeholders(note) {
    state.figs = {};
    const line = el("live-hidden");
    if (line) line.textContent = "";
    document.querySelectorAll("#live-charts .grpo-panel").forEach(box => {
      box.style.display = "";
      const gd = box.querySelector(".grpo-gd");
      if (gd && window.Plotly) Plotly.purge(gd);
      if (gd) gd.remove();
      if (!box.querySelector(".grpo-placeholder")) {
        const ph = document.createElement("div");
        ph.className = "grpo-placeholder";
        ph.innerHTML = "<h4></h4><p></p>";
        ph.querySelector("h4").textContent = box.dataset.title || "";
        box.appendChild(ph);
      }
      box.querySelector(".grpo-placeholder p").textContent = note;
    });
  }

  function open(run, smoothing, logY, xaxis) {
    const sm = Number(smoothing);
    const opts = { run: run || "", smoothing: isFinite(sm) ? sm : 0.6, logY: !!logY, xaxis: xaxis || "step" };
    const o = state.opts;
    if (state.source && o && o.run === opts.run && o.smoothing === opts.smoothing && o.logY === opts.logY &&
        o.xaxis === opts.xaxis && state.source.readyState !== EventSource.CLOSED) return;  // already following it
    if (state.source) { state.source.close(); state.source = null; }
    clearTimeout(state.timer);
    const other = !o || o.run !== opts.run;
    state.opts = opts;
    state.samples = undefined;
    setParam("run", run || null);
    // The chart settings travel with a copied link (defaults are left out of it).
    setParam("smoothing", opts.smoothing === 0.6 ? null : String(opts.smoothing));
    setParam("log_y", opts.logY ? "1" : null);
    setParam("x", opts.xaxis === "step" ? null : opts.xaxis);
    if (other) {  // a different run: nothing of the previous one stays on the page under the new name
      state.texts = { findings: "" };
      statusText(run ? "Opening run " + run + "…" : "");
      const pre = el("live-log");
      if (pre) { pre.textContent = ""; delete pre.dataset.filled; }
    }
    if (!run) { placeholders("Select a run (or launch one from New run)."); return; }
    placeholders("Waiting for the first log record…");
    connect(null);
  }

  function connect(cursor) {
    const o = state.opts;
    const q = new URLSearchParams({ run: o.run, smoothing: String(o.smoothing), xaxis: o.xaxis,
                                    log_y: o.logY ? "1" : "0" });
    if (cursor) q.set("cursor", cursor);
    const source = new EventSource(STREAM + "?" + q.toString());
    state.source = source;
    source.addEventListener("snapshot", e => { state.received++; state.retry = 0; drawSnapshot(JSON.parse(e.data)); });
    source.addEventListener("delta", e => { state.received++; state.retry = 0; queueDelta(JSON.parse(e.data)); });
    source.addEventListener("gone", () => { source.close(); placeholders("This run no longer exists."); });
    source.addEventListener("refused", e => {
      // Over the per-user cap of open streams: say why, and try again later (other tabs may have closed by then).
      source.close();
      statusText(JSON.parse(e.data).error);
      state.timer = setTimeout(() => { if (state.source === source) connect(null); }, 10000);
    });
    source.onerror = () => {
      // EventSource reconnects by itself (sending Last-Event-ID); after a refusal (404/400) it stops: say so.
      if (source.readyState === EventSource.CLOSED && state.source === source) {
        if (!Object.keys(state.figs).length) statusText("No such run among yours.");
        state.retry = Math.min(5, state.retry + 1);
        state.timer = setTimeout(() => { if (state.source === source) connect(null); }, 1000 * state.retry);
      }
    };
  }

  function setTab(tab) { if (state.loaded) setParam("tab", tab); }

  function loaded() { state.loaded = true; }

  // Draw what is kept once its container appears (a tab opened, the page re-rendered).
  let pending = false;
  new MutationObserver(() => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; drawMissing(); });
  }).observe(document.documentElement, { childList: true, subtree: true });

  // A deep link starts following its run at once, with the page's default options, while Gradio is still starting;
  // the app's own call with the same run and options then keeps this stream.
  const linkedQuery = new URLSearchParams(initialSearch);
  const linked = linkedQuery.get("run");
  if (linked) {
    const sm = Number(linkedQuery.get("smoothing") || "0.6");
    open(linked, isFinite(sm) ? Math.min(0.99, Math.max(0, sm)) : 0.6, linkedQuery.get("log_y") === "1",
         linkedQuery.get("x") || "step");
  }

  window.grpoLive = { open, setTab, setParam, loaded, state, initialSearch, CONFIG, xs, ys,
                      onDrawn: hook => drawnHooks.push(hook), onSamples: hook => samplesHooks.push(hook),
                      hideEmpty, GENERIC_NOTE };
})();
