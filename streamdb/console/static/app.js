// StreamDB console: plain JS, no build step. Polls /api/stats and /api/objects, runs SQL through
// /api/sql and push queries (EMIT CHANGES) through the /api/push WebSocket.
"use strict";

const $ = (sel) => document.querySelector(sel);
const PUSH = /\bEMIT\s+CHANGES\b|^\s*SUBSCRIBE\b/i;
const KIND_LABEL = { stream: "stream", table: "table", view: "view", materialized_view: "mat. view",
                     "push query": "push query" };
let pushSocket = null;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function setStatus(text, down = false) {
  const s = $("#status");
  s.textContent = text;
  s.classList.toggle("down", down);
}

async function getJSON(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

// --- objects ---------------------------------------------------------------------------------

let objectNames = "";

async function refreshObjects() {
  const data = await getJSON("/api/objects");
  const key = JSON.stringify(data.objects.map((o) => [o.name, o.kind]));
  if (key === objectNames) return;
  objectNames = key;
  const list = $("#objects");
  list.replaceChildren();
  for (const o of data.objects) {
    const item = el("li", { "data-name": o.name, "data-kind": o.kind, title: o.columns.map((c) => `${c.name} ${c.type}`).join(", ") },
      el("span", { class: "name", text: o.name }),
      el("span", { class: `kind ${o.kind}`, text: KIND_LABEL[o.kind] || o.kind }));
    item.addEventListener("click", () => { $("#sql").value = `SELECT * FROM ${o.name} LIMIT 100`; $("#sql").focus(); });
    list.append(item);
  }
  const select = $("#dl-source");
  const previous = select.value;
  select.replaceChildren();
  for (const o of data.objects.filter((x) => x.dead_letters)) {
    select.append(el("option", { value: o.name, text: `${o.name} → ${o.dead_letters}` }));
  }
  if (previous) select.value = previous;
  if (!select.options.length) select.append(el("option", { value: "", text: "(no external streams)" }));
}

// --- charts ----------------------------------------------------------------------------------

const W = 300, H = 60, MIN_POINTS = 30, MAX_POINTS = 120;  // one-second samples, newest on the right

function pathOf(values, max, area) {
  if (!values.length) return "";
  const step = W / (Math.min(MAX_POINTS, Math.max(MIN_POINTS, values.length)) - 1);
  const x = (i) => (W - (values.length - 1 - i) * step).toFixed(1);
  const y = (v) => (H - 3 - ((v || 0) / (max || 1)) * (H - 8)).toFixed(1);
  let d = values.map((v, i) => `${i ? "L" : "M"}${x(i)},${y(v)}`).join(" ");
  if (area) d += ` L${W},${H} L${x(0)},${H} Z`;
  return d;
}

function fmt(n, digits = 0) {
  if (n === null || n === undefined) return "–";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return Number(n).toFixed(digits);
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function chartCard(item) {
  const svgNS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  for (const cls of ["rate", "rows", "lag"]) {
    const p = document.createElementNS(svgNS, "path");
    p.setAttribute("class", cls);
    p.setAttribute("vector-effect", "non-scaling-stroke");
    svg.append(p);
  }
  const figure = (name, label) => el("div", { class: name }, el("b", { class: `${name}-value`, text: "–" }),
                                     el("span", { class: "label", text: label }));
  const kindClass = item.kind === "push query" ? "push" : item.kind;
  return el("div", { class: "chart", "data-name": item.name },
    el("div", { class: "title" }, el("span", { class: "name", text: item.name }),
       el("span", { class: `kind ${kindClass}`, text: KIND_LABEL[item.kind] || item.kind })),
    svg,
    el("div", { class: "legend" }, el("i", { style: "background: var(--accent)" }), "rows",
       el("i", { style: "background: var(--accent2)" }), "input/s", el("i", { style: "background: var(--warn)" }), "lag",
       el("span", { class: "span", text: " · up to 2 min" })),
    el("div", { class: "figures" }, figure("rows", "rows"), figure("rate", "input/s"), figure("lag", "lag"),
       figure("freshness", "freshness"), figure("errors", "errors")));
}

function renderStats(stats) {
  const box = $("#charts");
  const seen = new Set();
  for (const item of stats.items) {
    seen.add(item.name);
    let card = box.querySelector(`.chart[data-name="${CSS.escape(item.name)}"]`);
    if (!card) { card = chartCard(item); box.append(card); }
    const h = item.history;
    const rows = h.map((p) => p.rows || 0), rates = h.map((p) => p.input_rate), lags = h.map((p) => p.lag || 0);
    const rateMax = Math.max(1, ...rates);
    card.querySelector("path.rows").setAttribute("d", pathOf(rows, Math.max(1, ...rows), false));
    card.querySelector("path.rate").setAttribute("d", pathOf(rates, rateMax, true));
    card.querySelector("path.lag").setAttribute("d", item.lag === null ? "" : pathOf(lags, Math.max(1, ...lags), false));
    card.dataset.points = String(h.length);
    card.querySelector(".rows-value").textContent = fmt(item.rows);
    card.querySelector(".rate-value").textContent = fmt(item.input_rate, item.input_rate < 10 ? 1 : 0);
    card.querySelector(".lag-value").textContent = fmt(item.lag);
    card.querySelector(".freshness-value").textContent = fmtMs(item.freshness_ms);
    card.querySelector(".errors-value").textContent = fmt(item.errors);
    card.querySelector(".errors").classList.toggle("bad", item.errors > 0);
    card.title = item.error ? `error: ${item.error}` : (item.status || "");
  }
  for (const card of [...box.children]) if (!seen.has(card.dataset.name)) card.remove();
}

async function poll() {
  try {
    const stats = await getJSON("/api/stats");
    renderStats(stats);
    setStatus(`live · ${new Date(stats.now * 1000).toLocaleTimeString()}`);
  } catch (e) {
    setStatus(`disconnected (${e.message})`, true);
  }
}

// --- SQL -------------------------------------------------------------------------------------

function showError(err) {
  const box = $("#error");
  box.hidden = false;
  box.querySelector(".sqlstate").textContent = err.sqlstate || "";
  box.querySelector(".message").textContent = err.error;
  const extra = [];
  if (err.position) extra.push(`at character ${err.position}`);
  if (err.detail) extra.push(`detail: ${err.detail}`);
  if (err.hint) extra.push(`hint: ${err.hint}`);
  box.querySelector(".extra").textContent = extra.join(" · ");
}

function clearOutput() {
  $("#error").hidden = true;
  $("#result").replaceChildren();
  $("#result-status").textContent = "";
}

function cellNode(value) {
  if (value === null) return el("td", { class: "null", text: "NULL" });
  return el("td", { text: typeof value === "object" ? JSON.stringify(value) : String(value) });
}

function resultTable(columns) {
  const head = el("tr");
  for (const c of columns) head.append(el("th", {}, c.name, " ", el("small", { text: c.type })));
  return el("table", {}, el("thead", {}, head), el("tbody"));
}

function appendRows(table, rows, flash) {
  const body = table.querySelector("tbody");
  for (const row of rows) {
    const tr = el("tr", flash ? { class: "new" } : {});
    for (const v of row) tr.append(cellNode(v));
    body.append(tr);
  }
}

async function runSql() {
  const sql = $("#sql").value;
  stopPush();
  clearOutput();
  if (PUSH.test(sql)) return startPush(sql);
  $("#result-status").textContent = "running…";
  const started = performance.now();
  let data;
  try {
    const response = await fetch("/api/sql", { method: "POST", headers: { "Content-Type": "application/json" },
                                               body: JSON.stringify({ sql }) });
    data = await response.json();
  } catch (e) {
    data = { error: String(e), sqlstate: "08006" };
  }
  const ms = Math.round(performance.now() - started);
  if (data.error) { showError(data); $("#result-status").textContent = `failed after ${ms} ms`; return; }
  const box = $("#result");
  for (const r of data.results) {
    if (r.columns) {
      const table = resultTable(r.columns);
      appendRows(table, r.rows, false);
      box.append(table);
    }
    for (const n of r.notices) box.append(el("div", { class: "muted", text: `NOTICE: ${n}` }));
  }
  const last = data.results[data.results.length - 1];
  $("#result-status").textContent = last ? `${last.command}${last.truncated ? " (first rows shown)" : ""} · ${ms} ms` : "";
  refreshObjects().catch(() => {});
}

function startPush(sql) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/api/push`);
  pushSocket = socket;
  let table = null, count = 0;
  $("#stop").disabled = false;
  $("#result-status").textContent = "push query starting…";
  socket.onopen = () => socket.send(JSON.stringify({ sql }));
  socket.onmessage = (event) => {
    const msg = JSON.parse(event.data);
    if (msg.error) { showError(msg); return; }
    if (msg.columns) {
      table = resultTable(msg.columns);
      table.id = "push-result";
      $("#result").replaceChildren(table);
      $("#result-status").textContent = "push query running: changes appear as they happen";
    }
    if (msg.rows && table) {
      appendRows(table, msg.rows, true);
      count += msg.rows.length;
      $("#result-status").textContent = msg.end ? `${count} rows` : `push query running · ${count} changes`;
    }
  };
  socket.onclose = () => {
    if (pushSocket === socket) { pushSocket = null; $("#stop").disabled = true; }
    if (table) $("#result-status").textContent = `push query ended · ${count} changes`;
  };
}

function stopPush() {
  if (pushSocket) { pushSocket.close(); pushSocket = null; }
  $("#stop").disabled = true;
}

// --- dead letters ----------------------------------------------------------------------------

async function loadDeadLetters() {
  const source = $("#dl-source").value;
  const box = $("#dead-letters");
  box.replaceChildren();
  if (!source) return;
  const data = await getJSON(`/api/dead-letters?source=${encodeURIComponent(source)}`).catch((e) => ({ error: String(e) }));
  if (data.error) { box.append(el("div", { class: "error", text: `${data.sqlstate || ""} ${data.error}` })); return; }
  const table = resultTable(data.columns);
  appendRows(table, data.rows, false);
  box.append(table);
  $("#dl-status").textContent = `${data.rows.length} most recent from ${data.dead_letters}`;
}

// --- start -----------------------------------------------------------------------------------

$("#run").addEventListener("click", runSql);
$("#stop").addEventListener("click", () => { stopPush(); $("#result-status").textContent = "push query stopped"; });
$("#dl-load").addEventListener("click", loadDeadLetters);
$("#sql").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) runSql(); });
refreshObjects().catch((e) => setStatus(`disconnected (${e.message})`, true));
poll();
setInterval(poll, 1000);
setInterval(() => refreshObjects().catch(() => {}), 3000);
