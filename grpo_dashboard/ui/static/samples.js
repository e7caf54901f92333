// The light run page's Completions and Trajectories (/grpo/run): one sampled step of the run from GET /grpo/samples
// (grpo_dashboard/ui/samples_route.py, which checks who may see the run), loaded when its section is opened. A table
// of completions sortable by any reward; trajectories as conversations (tool calls, results, failures, dropped
// results) filterable by an extra column. Following the latest step, an open section reloads when the run's samples
// file grows (live.js's stream says so). The open sections and a chosen step travel with the link (?samples=,
// ?sample_step=). Every text is set as text, never as HTML.
(function () {
  "use strict";
  const ROUTE = "/grpo/samples";
  const VIEWS = ["completions", "trajectories"];
  const views = {};  // name -> { box, step, sort, desc, filter, note, body, busy, dirty, seq }
  const query = new URLSearchParams(window.location.search);
  let pinned = /^\d+$/.test(query.get("sample_step") || "") ? Number(query.get("sample_step")) : null;

  function el(id) { return document.getElementById(id); }
  function setParam(name, value) { if (window.grpoLive) window.grpoLive.setParam(name, value); }
  function runId() { return new URLSearchParams(window.location.search).get("run"); }

  function node(tag, cls, text) {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }

  function num(v) {
    if (v === null || v === undefined || v === "") return "—";
    if (typeof v !== "number") return String(v);
    return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
  }

  function many(n, what) { return n + " " + what + (n === 1 ? "" : "s"); }

  function options(select, items, chosen) {
    const want = items.map(([value, label]) => value + "\u0000" + label).join("\u0001");
    if (select.dataset.items !== want) {
      select.replaceChildren(...items.map(([value, label]) => {
        const o = node("option", null, label);
        o.value = value;
        return o;
      }));
      select.dataset.items = want;
    }
    select.value = chosen;
  }

  function saveOpen() {
    setParam("samples", VIEWS.filter(v => views[v].box.open).join(",") || null);
  }

  async function load(name) {
    const v = views[name];
    const run = runId();
    if (!run) { v.note.textContent = "Select a run."; return; }
    if (v.busy) { v.dirty = true; return; }
    v.busy = true;
    const q = new URLSearchParams({ run: run, view: name, desc: v.desc.checked ? "1" : "0" });
    if (pinned !== null) q.set("step", String(pinned));
    if (v.sortKey) q.set("sort", v.sortKey);
    if (v.filterKey) q.set("filter", v.filterKey);
    try {
      const res = await fetch(ROUTE + "?" + q.toString(), { credentials: "same-origin" });
      const body = await res.json();
      if (res.ok) render(name, body);
      else if (res.status === 400 && (v.sortKey || v.filterKey) && /^(sort|filter):/.test(body.error || "")) {
        v.sortKey = ""; v.filterKey = "";  // this step lacks that reward or column: its defaults instead
        v.dirty = true;
      } else {
        v.note.textContent = body.error || "The samples could not be read (HTTP " + res.status + ").";
        v.body.replaceChildren();
      }
    } catch (e) {
      v.note.textContent = "The samples could not be read: " + e;
    } finally {
      v.busy = false;
      if (v.dirty) { v.dirty = false; load(name); }
    }
  }

  function render(name, body) {
    const v = views[name];
    const steps = (body.steps || []).slice().reverse();
    options(v.step, [["", "latest" + (steps.length ? " (" + steps[0] + ")" : "")],
                     ...steps.map(s => [String(s), String(s)])], pinned === null ? "" : String(body.step));
    options(v.sort, (body.sorts || []).map(s => [s, s]), body.sort || "");
    v.sortKey = body.sort === (body.sorts || [])[0] ? "" : body.sort;
    v.empty = body.step === null || body.step === undefined;
    if (v.empty) {
      v.note.textContent = "No samples logged yet: the job writes each logged step's completions (and TRL's " +
        "log_completions table) as it trains.";
      v.body.replaceChildren();
      return;
    }
    const shown = name === "completions" ? body.rows.length : body.trajectories.length;
    const of = name === "trajectories" && body.matched !== body.count
      ? body.matched + " of " + body.count + " samples match" : body.count + " samples";
    v.note.textContent = "Step " + body.step + ": " + of + (shown < (body.matched ?? body.count)
      ? "; the first " + shown + " shown" : "") + ".";
    if (name === "completions") v.body.replaceChildren(table(body));
    else {
      const items = [["", "all samples"]];
      for (const [col, values] of Object.entries(body.filters || {})) {
        for (const value of values) items.push([col + "=" + value, col + " = " + value]);
      }
      options(v.filter, items, v.filterKey || "");
      v.filter.parentElement.hidden = items.length < 2;
      v.body.replaceChildren(...body.trajectories.map(trajectory));
    }
  }

  function table(body) {
    const t = node("table", "grpo-samples-table");
    const head = node("tr");
    for (const c of body.columns) head.appendChild(node("th", null, c));
    t.appendChild(node("thead")).appendChild(head);
    const rows = t.appendChild(node("tbody"));
    const texts = new Set(["prompt", "completion"]);
    for (const row of body.rows) {
      const tr = rows.appendChild(node("tr"));
      body.columns.forEach((c, i) => {
        const td = tr.appendChild(node("td", texts.has(c) ? "grpo-text" : "grpo-num"));
        if (texts.has(c)) td.appendChild(node("div", null, row[i]));
        else td.textContent = num(row[i]);
      });
    }
    return t;
  }

  function unreturned(call) {
    if (call.outcome === "dropped") {
      const size = call.result_chars ? " (" + call.result_chars + " characters)" : "";
      return (call.failed ? "failed: " + (call.error || "") + "; " : "ran; ") + "TRL dropped its result" + size +
        ", which would have passed max_completion_length (counted in tools/*)";
    }
    if (call.outcome === "not_run") return "not run: the tool loop had ended (max_tool_calling_iterations)";
    if (call.outcome === "no_result") return "no result in the trajectory";
    return "";
  }

  function trajectory(t) {
    const art = node("article", "grpo-traj");
    const head = ["#" + t.index, "total " + num(t.total), "advantage " + num(t.advantage),
                  ...Object.entries(t.rewards || {}).map(([k, v]) => k + " " + num(v)),
                  ...Object.entries(t.extra || {}).map(([k, v]) => k + "=" + v)];
    art.appendChild(node("h4", null, head.join(" · ")));
    const counts = [many(t.n_turns, "turn"), many(t.n_tool_calls, "tool call"), t.n_failed + " failed"];
    if (t.n_dropped) counts.push(many(t.n_dropped, "result") + " dropped");
    if (t.malformed) counts.push(many(t.malformed, "malformed call"));
    art.appendChild(node("p", "grpo-traj-counts", counts.join(" · ")));
    const list = art.appendChild(node("ol", "grpo-turns"));
    for (const turn of t.turns || []) {
      const li = list.appendChild(node("li", "grpo-turn grpo-role-" + String(turn.role).replace(/[^a-z]/g, "")));
      if (turn.role === "tool" && turn.failed) {
        li.classList.add("grpo-failed");
        li.appendChild(node("b", null, "✗ tool failed: "));
        li.appendChild(node("span", "grpo-text", turn.error));
        continue;
      }
      li.appendChild(node("b", null, turn.role === "tool" ? "tool → " : turn.role + ": "));
      li.appendChild(node("span", "grpo-text", turn.content === null || turn.content === undefined
        ? "" : typeof turn.content === "string" ? turn.content : JSON.stringify(turn.content)));
      for (const call of turn.calls || []) {
        const c = li.appendChild(node("div", "grpo-call"));
        c.appendChild(node("code", null, "→ call " + call.name + "(" + JSON.stringify(call.arguments) + ")"));
        const notes = [];
        if (call.repeated_failure) notes.push("⚠ repeats a failed call");
        const what = unreturned(call);
        if (what) notes.push(what);
        if (notes.length) {
          c.appendChild(node("span", "grpo-call-note", " " + notes.join(" · ")));
          if (call.outcome === "dropped" || call.outcome === "not_run") c.classList.add("grpo-unreturned");
        }
      }
    }
    const fin = art.appendChild(node("p", "grpo-final"));
    fin.appendChild(node("b", null, "final answer: "));
    fin.appendChild(node("span", "grpo-text", t.final_answer));
    return art;
  }

  function setup() {
    const wanted = (query.get("samples") || "").split(",");
    for (const name of VIEWS) {
      const box = el("samples-" + name);
      if (!box) return;
      const v = views[name] = {
        box, step: box.querySelector("[data-k=step]"), sort: box.querySelector("[data-k=sort]"),
        desc: box.querySelector("[data-k=desc]"), filter: box.querySelector("[data-k=filter]"),
        note: box.querySelector(".grpo-samples-note"), body: box.querySelector(".grpo-samples-body"),
        busy: false, dirty: false, empty: false, sortKey: "", filterKey: "",
      };
      box.addEventListener("toggle", () => { saveOpen(); if (box.open) load(name); });
      v.step.addEventListener("change", () => {
        pinned = v.step.value === "" ? null : Number(v.step.value);
        setParam("sample_step", pinned === null ? null : String(pinned));
        for (const other of VIEWS) if (views[other] && views[other].box.open) load(other);
      });
      v.sort.addEventListener("change", () => { v.sortKey = v.sort.value; load(name); });
      v.desc.addEventListener("change", () => load(name));
      if (v.filter) v.filter.addEventListener("change", () => { v.filterKey = v.filter.value; load(name); });
      if (wanted.includes(name)) box.open = true;  // fires toggle: loads it
    }
    // Following the latest step: a grown samples file reloads what is open.
    if (window.grpoLive && window.grpoLive.onSamples) {
      // (The stream's first word of the size is the file the section may have read already, unless it had none.)
      window.grpoLive.onSamples(first => {
        if (pinned !== null) return;
        for (const name of VIEWS) if (views[name].box.open && (!first || views[name].empty)) load(name);
      });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setup);
  else setup();
})();
