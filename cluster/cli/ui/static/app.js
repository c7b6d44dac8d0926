// soloist runs page. Every value from a run is put in the page with textContent or as an
// attribute value, never parsed as HTML: a "<script>" in a state is shown as text.
"use strict";

const TOKEN_KEY = "soloist-action-token";
const PAGE = 200;          // timeline entries per page
const MAX_ROWS = 2000;     // timeline entries kept in the page (older ones can be paged in again)
const CHART_SECONDS = 120; // span of the in-flight chart

// When the timeline first painted and when each live version was shown (wall-clock ms),
// read by the load measurements; bounded so a long session does not grow it forever.
const timings = window.soloistTimings = { timeline: null, versions: [] };
function noteVersionShown(version) {
  timings.versions.push([version, performance.timeOrigin + performance.now()]);
  if (timings.versions.length > 20000) timings.versions.splice(0, 10000);
}

// ------------------------------------------------------------------ small DOM helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "cls") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
function fmtTime(at) { return at ? new Date(at * 1000).toLocaleTimeString() : "–"; }
function runUrl(name) { return "/run?" + new URLSearchParams({ name }).toString(); }

async function getJson(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// ------------------------------------------------------------------ the action token

function takeTokenFromUrl() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function setupTokenBox(actions) {
  const mode = document.getElementById("mode");
  mode.textContent = actions ? "actions allowed (token needed)" : "read-only";
  const box = document.getElementById("token-box");
  box.hidden = !actions;
  if (!actions) return;
  const input = document.getElementById("token");
  const state = document.getElementById("token-state");
  const show = () => { state.textContent = token() ? "token set" : "no token"; };
  document.getElementById("token-save").onclick = () => {
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    show();
  };
  show();
}

async function postAction(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Soloist-Token": token() },
    body: JSON.stringify(body),
  });
  let payload;
  try { payload = await response.json(); } catch (e) { payload = { error: response.statusText }; }
  if (!response.ok || payload.ok === false) {
    const error = new Error(payload.error || ("HTTP " + response.status));
    error.kind = payload.type;
    throw error;
  }
  return payload;
}

// ------------------------------------------------------------------ runs list

const RUNS_PAGE = 50;  // runs per page: only the runs of the page are read by the server

function where(run) {
  const parts = [];
  if (run.live) {
    if (run.host === "dedicated") parts.push("live (dedicated)");
    else if (run.host) parts.push("live on " + run.host + (run.loaded === false ? " (unloaded)" : run.loaded ? " (loaded)" : ""));
    else parts.push("live");
  }
  if (run.stored) parts.push("store");
  return parts.join(" + ");
}

async function showRuns(main) {
  // the page of runs shown: kept in the address, so a reload (or a shared link) shows the same page
  const params = new URLSearchParams(location.search);
  const view = {
    offset: Math.max(0, parseInt(params.get("offset") || "0", 10) || 0),
    limit: RUNS_PAGE,
    status: params.get("status") || "",
  };
  clear(main).append(
    el("h1", { text: "Runs" }),
    el("p", { id: "runs-note", cls: "muted" }),
    el("div", { id: "runs-controls", cls: "controls" },
      el("label", {}, "status ", el("select", { id: "status-filter" }, el("option", { value: "", text: "all" }))), " ",
      el("button", { id: "prev-page", type: "button", text: "← previous", disabled: true }), " ",
      el("span", { id: "page-info", cls: "muted" }), " ",
      el("button", { id: "next-page", type: "button", text: "next →", disabled: true })),
    el("table", { id: "runs-table" },
      el("thead", {}, el("tr", {}, ...["run", "status", "run status", "stage", "version", "last change", "in flight / cap", "where"].map(h => el("th", { text: h })))),
      el("tbody", { id: "runs-body" })),
    el("h2", { text: "Run hosts" }),
    el("p", { id: "hosts-note", cls: "muted" }),
    el("table", { id: "hosts-table" },
      el("thead", {}, el("tr", {}, ...["host", "pid", "loaded", "unloaded", "activations", "unloads"].map(h => el("th", { text: h })))),
      el("tbody", { id: "hosts-body" })),
    el("h2", { text: "Subagent pools" }),
    el("p", { id: "pools-note", cls: "muted" }),
    el("table", { id: "pools-table" },
      el("thead", {}, el("tr", {}, ...["skill", "pool", "replicas", "running", "waiting", "queue wait p50", "nodes"].map(h => el("th", { text: h })))),
      el("tbody", { id: "pools-body" })),
  );
  const body = document.getElementById("runs-body");
  const hostsBody = document.getElementById("hosts-body");
  const hostsNote = document.getElementById("hosts-note");
  const poolsBody = document.getElementById("pools-body");
  const poolsNote = document.getElementById("pools-note");
  const note = document.getElementById("runs-note");
  const filter = document.getElementById("status-filter");
  const prev = document.getElementById("prev-page");
  const next = document.getElementById("next-page");
  const info = document.getElementById("page-info");
  let asked = 0;   // requests sent; an answer to an older one than the last shown is dropped
  let shown = 0;

  function go(offset, status) {
    view.offset = Math.max(0, offset); view.status = status;
    const query = new URLSearchParams();
    if (view.offset) query.set("offset", String(view.offset));
    if (view.status) query.set("status", view.status);
    history.replaceState(null, "", location.pathname + (query.toString() ? "?" + query : ""));
    refresh();
  }
  prev.onclick = () => go(view.offset - view.limit, view.status);
  next.onclick = () => go(view.offset + view.limit, view.status);
  filter.onchange = () => go(0, filter.value);

  function renderFilter(page) {
    const every = Object.values(page.counts).reduce((a, b) => a + b, 0);
    if (filter.options.length !== page.statuses.length + 1) {
      for (const status of page.statuses) filter.append(el("option", { value: status, text: status }));
    }
    filter.options[0].textContent = "all (" + every + ")";
    for (const option of [...filter.options].slice(1)) {
      option.textContent = option.value + " (" + (page.counts[option.value] || 0) + ")";
    }
    filter.value = view.status;
  }

  function renderPage(page) {
    const first = page.runs.length ? page.offset + 1 : 0;
    info.textContent = page.runs.length
      ? "showing " + first + "–" + (page.offset + page.runs.length) + " of " + page.total + " runs"
      : "no runs " + (page.total ? "from " + (page.offset + 1) + " (" + page.total + " in all)" : "here");
    prev.disabled = page.offset <= 0;
    next.disabled = page.offset + page.runs.length >= page.total;
    body.setAttribute("data-offset", String(page.offset));
    body.setAttribute("data-total", String(page.total));
    body.setAttribute("data-filter", page.status || "");
  }

  async function refresh() {
    const mine = ++asked;
    const query = new URLSearchParams({ offset: String(view.offset), limit: String(view.limit) });
    if (view.status) query.set("status", view.status);
    try {
      const page = await getJson("/api/runs?" + query);
      if (mine < shown) return;
      shown = mine;
      setupTokenBox(page.actions);
      note.textContent = page.total ? (page.store ? "store: " + page.store : "live runs of the cluster") : "no runs yet";
      renderFilter(page);
      renderPage(page);
      clear(body);
      for (const run of page.runs) {
        body.append(el("tr", { "data-run": run.name, "data-status": run.status, "data-run-status": run.run_status || "", "data-host": run.host || "" },
          el("td", {}, el("a", { href: runUrl(run.name), text: run.name })),
          el("td", {}, el("span", { cls: "badge " + run.status, text: run.status })),
          el("td", { text: run.run_status || "–" }),
          el("td", { text: run.stage || "–" }),
          el("td", { cls: "num version", text: run.version }),
          el("td", { text: fmtTime(run.last_change_at) }),
          el("td", { cls: "num", text: run.live ? (run.in_flight ?? 0) + " / " + (run.cap ?? "?") : "–" }),
          el("td", { cls: "where", text: where(run) + (run.error ? " (" + run.error + ")" : "") })));
      }
      const hosts = page.hosts || [];
      hostsNote.textContent = hosts.length ? "" : "no run host is up";
      clear(hostsBody);
      for (const host of hosts) {
        hostsBody.append(el("tr", { "data-host": host.name },
          el("td", { text: host.name + (host.restarted ? " (restarted)" : "") }),
          el("td", { cls: "num", text: host.pid }),
          el("td", { cls: "num loaded", text: host.loaded }),
          el("td", { cls: "num unloaded", text: host.unloaded }),
          el("td", { cls: "num activations", text: host.activations }),
          el("td", { cls: "num unloads", text: host.unloads })));
      }
      const pools = page.pools || [];
      poolsNote.textContent = pools.length ? "" : "no subagent replica is up";
      clear(poolsBody);
      for (const pool of pools) {
        poolsBody.append(el("tr", { "data-skill": pool.skill, "data-pool": pool.pool },
          el("td", { text: pool.skill }),
          el("td", { text: pool.pool }),
          el("td", { cls: "num replicas", text: pool.replicas }),
          el("td", { cls: "num", text: pool.running }),
          el("td", { cls: "num waiting", text: pool.waiting }),
          el("td", { cls: "num", text: (pool.queue_wait_p50_s * 1000).toFixed(1) + " ms" }),
          el("td", { cls: "num", text: pool.nodes.length })));
      }
    } catch (e) {
      if (mine >= shown) note.textContent = "cannot list runs: " + e.message;
    }
  }
  await refresh();
  setInterval(refresh, 2000);
}

// ------------------------------------------------------------------ JSON tree (lazy)

function jsonNode(value, key, path, openPaths) {
  const label = key === undefined ? [] : [el("span", { cls: "k", text: JSON.stringify(key) }), ": "];
  if (value !== null && typeof value === "object") {
    const isArray = Array.isArray(value);
    const size = isArray ? value.length : Object.keys(value).length;
    const details = el("details", { "data-path": path }, el("summary", {}, ...label, isArray ? "[" + size + "]" : "{" + size + "}"));
    let filled = false;
    const fill = () => {
      if (!details.open || filled) return;
      filled = true;
      const entries = isArray ? value.map((v, i) => [i, v]) : Object.entries(value);
      for (const [k, v] of entries) details.append(jsonNode(v, k, path + "/" + k, openPaths));
    };
    details.addEventListener("toggle", fill);
    if (openPaths.has(path)) { details.open = true; fill(); }
    return details;
  }
  const cls = typeof value === "string" ? "s" : "n";
  return el("div", { cls: "row" }, ...label, el("span", { cls, text: JSON.stringify(value) }));
}

function renderState(container, state, note) {
  // re-rendering keeps the branches the reader opened
  const openPaths = new Set([...container.querySelectorAll("details[open]")].map(d => d.getAttribute("data-path")));
  openPaths.add("");
  clear(container).classList.add("json");
  if (note) container.append(el("p", { cls: "muted", text: note }));
  container.append(jsonNode(state, undefined, "", openPaths));
}

// ------------------------------------------------------------------ chart

function drawChart(canvas, samples, cap) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 600, height = canvas.clientHeight || 130;
  canvas.width = width * ratio; canvas.height = height * ratio;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.clearRect(0, 0, width, height);
  const top = Math.max(cap || 4, ...samples.map(s => s.in_flight), 1);
  const now = Date.now() / 1000, left = 28, bottom = height - 16;
  // the span grows with the samples held: at least 30 s, at most CHART_SECONDS
  const span = Math.min(CHART_SECONDS, Math.max(30, samples.length ? now - samples[0].at + 2 : 30));
  const x = at => left + (width - left - 6) * (1 - Math.min(span, now - at) / span);
  const y = n => bottom - (bottom - 8) * n / top;
  ctx.fillStyle = "#6b7383"; ctx.font = "11px system-ui";
  ctx.fillText(String(top), 4, y(top) + 4); ctx.fillText("0", 4, y(0) + 4);
  ctx.fillText("last " + Math.round(span) + " s", left, height - 3);
  if (cap) {
    ctx.strokeStyle = "#c0392b"; ctx.setLineDash([4, 4]);
    ctx.beginPath(); ctx.moveTo(left, y(cap)); ctx.lineTo(width - 6, y(cap)); ctx.stroke();
    ctx.setLineDash([]); ctx.fillStyle = "#c0392b"; ctx.fillText("cap " + cap, width - 46, y(cap) - 3);
  }
  ctx.strokeStyle = "#dde1e8"; ctx.beginPath(); ctx.moveTo(left, bottom); ctx.lineTo(width - 6, bottom); ctx.stroke();
  const points = samples.filter(s => now - s.at <= span + 2);
  if (!points.length) return;
  ctx.strokeStyle = "#2f6fdf"; ctx.lineWidth = 2; ctx.beginPath();
  points.forEach((s, i) => {
    if (i === 0) ctx.moveTo(x(s.at), y(s.in_flight));
    else { ctx.lineTo(x(s.at), y(points[i - 1].in_flight)); ctx.lineTo(x(s.at), y(s.in_flight)); }
  });
  ctx.lineTo(x(now), y(points[points.length - 1].in_flight));
  ctx.stroke();
}

// ------------------------------------------------------------------ one run

function timelineItem(entry, fresh) {
  const item = el("li", { "data-version": entry.version, cls: fresh ? "fresh" : null },
    el("span", { cls: "v", text: "v" + entry.version }),
    el("span", { cls: "muted", text: entry.kind + " · " + fmtTime(entry.at) }),
    entry.coordinator ? el("span", { cls: "badge", text: entry.coordinator }) : null,
    entry.confidence !== null && entry.confidence !== undefined ? el("span", { cls: "muted", text: " confidence " + entry.confidence }) : null);
  if (entry.reasoning) item.append(el("span", { cls: "why", text: entry.reasoning }));
  for (const t of entry.transitions) item.append(el("code", { cls: "t" }, el("span", { cls: "tt", text: t.type }), t.data));
  if (entry.more_transitions) item.append(el("span", { cls: "t muted", text: "+ " + entry.more_transitions + " more transitions" }));
  return item;
}

class RunPage {
  constructor(main, name) {
    this.main = main; this.name = name;
    this.version = 0; this.samples = []; this.cap = 4;
    this.answered = new Map(); // interrupt id -> {view, outcome, good}: stays visible after answering
    this.openInterrupts = [];
    this.refreshTimer = null; this.events = null; this.ended = false;
    this.oldestShown = null; this.nextBefore = null;
    this.stateVersion = -1;
  }

  detailUrl(withSamples) {
    return "/api/run?" + new URLSearchParams({ name: this.name, inflight: withSamples ? "1" : "0" });
  }

  async start() {
    // the summary and the newest timeline page first; the state (possibly large) after that paint
    const detail = await getJson(this.detailUrl(true));
    this.layout(detail);
    this.apply(detail);
    await this.loadHistory(null);
    // after the next frame is painted (rAF runs before paint; the timeout after it)
    requestAnimationFrame(() => setTimeout(() => { timings.timeline = performance.now(); performance.mark("soloist:timeline-painted"); }, 0));
    this.main.setAttribute("data-ready", "1");
    if (detail.live) this.follow();
    await this.refreshState();
  }

  async refreshState() {
    this.lastStateFetch = Date.now();
    const detail = await getJson("/api/state?" + new URLSearchParams({ name: this.name }));
    if (detail.version !== this.stateVersion) {
      this.stateVersion = detail.version;
      const container = document.getElementById("state");
      renderState(container, detail.state, detail.state_note);
      container.setAttribute("data-version", String(detail.version));
    }
  }

  layout(detail) {
    setupTokenBox(detail.actions);
    clear(this.main).append(
      el("h1", { id: "run-name", text: this.name }),
      el("div", { cls: "facts" },
        el("span", {}, el("span", { id: "status", cls: "badge" })),
        el("span", {}, "version ", el("b", { id: "version" })),
        el("span", {}, "stage ", el("b", { id: "stage" })),
        el("span", {}, "run ", el("b", { id: "run-status" })),
        el("span", { cls: "muted", id: "state-type" }),
        el("span", { cls: "muted", id: "live-note" })),
      el("div", { id: "error", role: "alert" }),
      el("section", { id: "interrupts-panel", cls: "panel", hidden: true }, el("h2", { text: "Waiting for approval" }), el("div", { id: "interrupts" })),
      el("section", { id: "fork-panel", cls: "panel", hidden: true }, el("h2", { text: "Fork" }),
        el("form", { id: "fork-form" },
          "from version ", el("input", { id: "fork-version", type: "number", min: "0", size: "8" }),
          " as ", el("input", { id: "fork-name", type: "text", placeholder: "new run name" }), " ",
          el("button", { type: "submit", id: "fork-button", text: "fork" }), " ",
          el("span", { id: "fork-outcome" }))),
      el("div", { cls: "grid" },
        el("section", {},
          el("h2", { text: "Handoffs in flight" }), el("canvas", { id: "inflight-chart" }),
          el("h2", { text: "Agents" }), el("table", { id: "agents" }),
          el("h2", { text: "Coordinator reasoning" }), el("ol", { id: "reasoning" }),
          el("h2", { text: "State" }), el("div", { id: "state" })),
        el("section", {},
          el("h2", {}, "Timeline ", el("span", { cls: "muted", id: "timeline-note" })),
          el("ul", { id: "timeline" }),
          el("p", {}, el("button", { id: "older", type: "button", text: "older versions", hidden: true })))),
    );
    document.getElementById("older").onclick = () => this.loadHistory(this.nextBefore);
    document.getElementById("fork-form").onsubmit = (ev) => { ev.preventDefault(); this.fork(); };
    document.getElementById("fork-version").oninput = (ev) => { ev.target.dataset.edited = "1"; };
    window.addEventListener("resize", () => this.chart());
  }

  apply(detail) {
    this.version = Math.max(this.version, detail.version);
    this.cap = detail.cap || this.cap;
    this.live = detail.live;
    const status = document.getElementById("status");
    status.textContent = detail.status; status.className = "badge " + detail.status;
    document.getElementById("version").textContent = String(this.version);
    document.getElementById("stage").textContent = detail.stage || "–";
    document.getElementById("run-status").textContent = detail.run_status || "–";
    document.getElementById("state-type").textContent = detail.state_type;
    this.renderAgents(detail.agents);
    this.renderReasoning(detail.reasoning);
    this.canAnswer = detail.can_answer;
    this.openInterrupts = detail.interrupts;
    this.renderInterrupts();
    const forkPanel = document.getElementById("fork-panel");
    forkPanel.hidden = !detail.can_fork;
    const forkVersion = document.getElementById("fork-version");
    if (!forkVersion.dataset.edited) forkVersion.value = String(this.version);
    if (detail.in_flight && detail.in_flight.length) this.samples = detail.in_flight.slice();
    this.chart();
  }

  renderAgents(agents) {
    const table = clear(document.getElementById("agents"));
    table.append(el("tr", {}, ...["agent", "kind", "lifecycle", "restarts", "last error"].map(h => el("th", { text: h }))));
    for (const a of agents) {
      table.append(el("tr", { "data-agent": a.agent_id },
        el("td", { text: a.title || a.agent_id }), el("td", { text: a.kind || "–" }),
        el("td", {}, el("span", { cls: "badge " + (a.lifecycle || ""), text: a.lifecycle || "?" })),
        el("td", { cls: "num", text: a.restarts ?? 0 }), el("td", { text: a.last_error || "" })));
    }
    if (!agents.length) table.append(el("tr", {}, el("td", { cls: "muted", text: "no managed agents" })));
  }

  renderReasoning(trail) {
    const list = clear(document.getElementById("reasoning"));
    for (const step of trail.slice(-30)) {
      list.append(el("li", {}, el("b", { text: step.coordinator || "?" }), ": ", step.reasoning || "",
        step.confidence !== null && step.confidence !== undefined ? el("span", { cls: "muted", text: " (confidence " + step.confidence + ")" }) : null));
    }
    if (!trail.length) list.append(el("li", { cls: "muted", text: "none recorded" }));
  }

  renderInterrupts() {
    const box = clear(document.getElementById("interrupts"));
    const shown = new Map(this.openInterrupts.map(i => [i.id, i]));
    for (const [id, done] of this.answered) if (!shown.has(id)) shown.set(id, done.view);
    document.getElementById("interrupts-panel").hidden = shown.size === 0;
    for (const view of shown.values()) {
      const done = this.answered.get(view.id);
      const reason = el("input", { type: "text", placeholder: "reason (optional)", cls: "reason" });
      const outcome = el("div", { cls: "outcome" + (done ? (done.good ? " good" : " bad") : ""), text: done ? done.outcome : "" });
      const card = el("div", { cls: "card" + (done ? " answered" : ""), "data-interrupt": view.id },
        el("div", {}, el("b", { text: view.kind || "interrupt" }), el("span", { cls: "muted", text: " " + view.id + " · opened at version " + (view.opened_version ?? "?") })),
        el("pre", { text: typeof view.question === "string" ? view.question : JSON.stringify(view.question, null, 2) }),
        view.call_ids && view.call_ids.length ? el("div", { cls: "muted", text: "calls: " + view.call_ids.join(", ") }) : null);
      if (this.canAnswer) {
        const act = (approve) => this.answer(view, approve, reason.value, outcome, card);
        card.append(el("div", {}, reason, " ",
          el("button", { cls: "approve", type: "button", text: "approve", onclick: () => act(true) }), " ",
          el("button", { cls: "reject", type: "button", text: "reject", onclick: () => act(false) })));
      } else {
        card.append(el("div", { cls: "muted", text: "answering needs --allow-actions and this run's store (or owner)" }));
      }
      card.append(outcome);
      box.append(card);
    }
  }

  showError(message) {
    const box = document.getElementById("error");
    box.textContent = message; box.classList.toggle("shown", Boolean(message));
  }

  async answer(view, approve, reason, outcome, card) {
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    try {
      const result = await postAction("/api/answer", { name: this.name, interrupt_id: view.id, approve, reason: reason || null });
      this.answered.set(view.id, { view, outcome: result.message, good: true });
      this.showError("");
      outcome.textContent = result.message; outcome.className = "outcome good";
      card.classList.add("answered");
    } catch (e) {
      const message = "could not " + (approve ? "approve" : "reject") + " " + view.id + ": " + e.message;
      outcome.textContent = message; outcome.className = "outcome bad";
      this.showError(message);
    } finally {
      for (const b of card.querySelectorAll("button")) b.disabled = false;
      this.scheduleRefresh();
    }
  }

  async fork() {
    const out = document.getElementById("fork-outcome");
    const atVersion = parseInt(document.getElementById("fork-version").value, 10);
    const newName = document.getElementById("fork-name").value.trim();
    try {
      const result = await postAction("/api/fork", { name: this.name, new_name: newName, at_version: atVersion });
      clear(out).append(result.message + " ", el("a", { href: runUrl(result.run), text: "open" }));
      this.showError("");
    } catch (e) {
      out.textContent = "";
      this.showError("could not fork: " + e.message);
    }
  }

  async loadHistory(before) {
    const params = { name: this.name, limit: PAGE };
    if (before !== null && before !== undefined) params.before = before;
    const page = await getJson("/api/history?" + new URLSearchParams(params));
    const list = document.getElementById("timeline");
    if (before === null || before === undefined) clear(list);
    for (const entry of page.entries) {
      if (list.querySelector('li[data-version="' + entry.version + '"]')) continue;
      list.append(timelineItem(entry, false));
    }
    this.nextBefore = page.next_before;
    document.getElementById("older").hidden = page.next_before === null || page.next_before === undefined;
    document.getElementById("timeline-note").textContent = page.note || "";
    list.setAttribute("data-loaded", String(list.children.length));
  }

  onChanges(data) {
    const list = document.getElementById("timeline");
    if (data.skipped > 0) {
      this.loadHistory(null);
    } else {
      const top = list.firstChild ? parseInt(list.firstChild.getAttribute("data-version"), 10) : 0;
      for (const old of list.querySelectorAll("li.fresh")) old.classList.remove("fresh");
      for (const entry of data.entries) {
        if (entry.version <= top) continue;
        list.insertBefore(timelineItem(entry, true), list.firstChild);
      }
      while (list.children.length > MAX_ROWS) list.removeChild(list.lastChild);
    }
    if (data.version > this.version) {
      this.version = data.version;
      document.getElementById("version").textContent = String(this.version);
      noteVersionShown(this.version);
    }
    this.scheduleRefresh();
  }

  scheduleRefresh() {
    // the summary (agents, interrupts, reasoning) at most every 0.7 s; the whole state at
    // most every 3 s, so a busy run does not resend a large state for every version
    if (!this.refreshTimer) {
      this.refreshTimer = setTimeout(async () => {
        this.refreshTimer = null;
        try { this.apply(await getJson(this.detailUrl(false))); }
        catch (e) { document.getElementById("live-note").textContent = "refresh failed: " + e.message; }
      }, 700);
    }
    if (!this.stateTimer) {
      const wait = Math.max(700, 3000 - (Date.now() - (this.lastStateFetch || 0)));
      this.stateTimer = setTimeout(async () => {
        this.stateTimer = null;
        if (this.version === this.stateVersion) return;
        try { await this.refreshState(); }
        catch (e) { document.getElementById("live-note").textContent = "refresh failed: " + e.message; }
      }, wait);
    }
  }

  follow() {
    const note = document.getElementById("live-note");
    const source = new EventSource("/api/events?" + new URLSearchParams({ name: this.name, since: this.version }));
    this.events = source;
    source.onopen = () => { note.textContent = "live"; };
    source.addEventListener("changes", ev => this.onChanges(JSON.parse(ev.data)));
    source.addEventListener("inflight", ev => {
      const sample = JSON.parse(ev.data);
      this.samples.push(sample);
      if (this.samples.length > 600) this.samples.shift();
      this.chart();
    });
    source.addEventListener("end", () => {
      this.ended = true; source.close();
      note.textContent = "the run stopped";
      const status = document.getElementById("status");
      status.textContent = "stopped"; status.className = "badge stopped";
    });
    source.addEventListener("failed", ev => { this.showError("live updates stopped: " + JSON.parse(ev.data).error); });
    source.onerror = () => {
      if (this.ended) return;
      source.close(); note.textContent = "reconnecting…";
      setTimeout(() => { if (!this.ended) this.follow(); }, 2000);
    };
    if (!this.chartTimer) this.chartTimer = setInterval(() => this.chart(), 1000);
  }

  chart() { drawChart(document.getElementById("inflight-chart"), this.samples, this.cap); }
}

// ------------------------------------------------------------------ start

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromUrl();
  const main = document.getElementById("main");
  const name = new URLSearchParams(location.search).get("name");
  if (location.pathname === "/run" && name) {
    document.title = name + " · soloist";
    new RunPage(main, name).start().catch(e => {
      clear(main).append(el("h1", { text: name }), el("p", { id: "error", cls: "shown", text: "cannot show this run: " + e.message }));
    });
  } else {
    showRuns(main);
  }
});
