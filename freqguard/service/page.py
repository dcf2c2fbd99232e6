"""The operator's page the decision service serves at ``/``: the policies and their rules,
live decisions and denials per policy and rule (from the service's metrics), a chart of
each policy's decisions per minute over the last hour (every worker's, refreshed every
five seconds from ``/v1/stats/history``), the keys denied most (digests unless the
token is typed in), and a lookup of
one context (its use per rule, its per-key limits, when it frees). One HTML document with
its script inline: no asset, no CDN. A lookup asks the ``/v1`` endpoints; the one write,
a per-key limit set or cleared, is the API's own ``PUT``/``DELETE`` call (JSON, this
origin), each with the token typed into the page when the service requires one."""

from __future__ import annotations

__all__ = ["PAGE"]

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>freqguard</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d2330; }
  h1 { font-size: 1.3rem; margin: 0 0 1rem; } h2 { font-size: 1.05rem; margin: 1.5rem 0 .5rem; }
  table { border-collapse: collapse; margin-bottom: .5rem; }
  th, td { text-align: left; padding: .25rem .75rem .25rem 0; border-bottom: 1px solid #e3e6ec; }
  th { font-weight: 600; color: #555d6e; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
  .denied { color: #b3261e; } .allowed { color: #1b7f3b; } .muted { color: #7a8191; } .matched { font-weight: 600; }
  form { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end; }
  label { display: flex; flex-direction: column; font-size: .85rem; color: #555d6e; }
  input, select, button { font: inherit; padding: .25rem .4rem; }
  svg.chart { background: #f7f8fa; margin: .25rem 1rem .75rem 0; }
  svg.chart .allowed { stroke: #1b7f3b; } svg.chart .denied { stroke: #b3261e; }
  svg.chart polyline { fill: none; stroke-width: 1.5; }
  #fields { display: contents; } [hidden] { display: none !important; }
</style>
</head>
<body>
<h1>freqguard <span class="muted" id="status">loading</span></h1>

<h2>Policies</h2>
<table id="policies"><thead><tr><th>policy</th><th>rule</th><th>by</th><th>rate</th>
<th>strategy</th><th>notes</th></tr></thead><tbody></tbody></table>

<h2>Decisions since this worker started</h2>
<table id="stats"><thead><tr><th>policy</th><th>rule</th><th>allowed</th><th>denied</th>
</tr></thead><tbody></tbody></table>

<h2>Decisions per minute, last hour, every worker <span class="muted" id="history-at"></span></h2>
<div id="history"></div>
<h2>Keys denied most, last 5 minutes <span class="muted" id="top-note"></span></h2>
<table id="top"><thead><tr><th>policy</th><th>key</th><th>denied</th></tr></thead>
<tbody></tbody></table>

<h2>Look up one context</h2>
<form id="lookup">
  <label>policy <select name="policy" id="policy"></select></label>
  <span id="fields"></span>
  <label>token <input name="token" id="token" type="password" autocomplete="off"></label>
  <button type="submit">look up</button>
</form>
<p id="answer" class="muted"></p>
<table id="usage"><thead><tr><th>rule</th><th>used</th><th>remaining</th><th>of</th>
<th>frees in</th><th>next hit</th><th>per-key limit</th></tr></thead><tbody></tbody></table>

<h2>Per-key limits <span class="muted" id="limit-key"></span></h2>
<table id="limits"><thead><tr><th>rule</th><th>policy's rate</th><th>this key's limit</th>
<th></th></tr></thead><tbody></tbody></table>
<form id="limit" hidden>
  <label>rule <select name="rule" id="limit-rule"></select></label>
  <label>rate <input name="rate" id="limit-rate" placeholder="60/minute"></label>
  <label>exempt <input name="exempt" id="limit-exempt" type="checkbox"></label>
  <label>for seconds <input name="ttl" id="limit-ttl" placeholder="until cleared"></label>
  <button type="submit" id="limit-set">set limit</button>
</form>
<p id="limit-answer" class="muted"></p>

<script>
const $ = (id) => document.getElementById(id);
const cell = (text, cls) => { const td = document.createElement("td");
  td.textContent = text; if (cls) td.className = cls; return td; };
const row = (cells) => { const tr = document.createElement("tr"); cells.forEach((c) => tr.append(c)); return tr; };
const seconds = (s) => s === 0 ? "-" : s >= 3600 ? (s / 3600).toFixed(1) + " h"
  : s >= 60 ? (s / 60).toFixed(1) + " min" : s.toFixed(2) + " s";
let policies = {};
const rateOf = (r, p) => r.rule === "quiet-hours" && p.quiet
  ? `quiet ${p.quiet.start}-${p.quiet.end} ${p.quiet.zone}`
  : r.lease !== null ? `${r.written}, lease ${seconds(r.lease)}` : r.written;
function notesOf(r, p) {
  const notes = [];
  if (r.zone) notes.push(`calendar in ${r.zone}`);
  if (r.burst !== null) notes.push(`burst ${r.burst}`);
  if (r.only) notes.push(`only ${r.only.join(", ")}`);
  const caps = Object.entries(r.caps);
  if (caps.length) notes.push("caps " + caps.map(([k, v]) => `${k} ${v}`).join(", "));
  if (r.shadow) notes.push("shadow");
  if (r.rule === "quiet-hours" && p.quiet && p.quiet.exempt.length) notes.push(`exempt ${p.quiet.exempt.join(", ")}`);
  return notes.join("; ") || "-";
}

function fieldsFor(name) {
  const box = $("fields"); box.replaceChildren();
  const params = new URLSearchParams(location.search);
  for (const field of (policies[name] || {}).context || []) {
    const label = document.createElement("label"); label.textContent = field;
    const input = document.createElement("input"); input.name = field; input.dataset.context = "1";
    input.value = params.get(field) || ""; label.append(input); box.append(label);
  }
}

async function send(method, path, body) {
  const token = $("token").value;
  const headers = {"content-type": "application/json"};
  if (token) headers.authorization = "Bearer " + token;
  const response = await fetch(path, {method, headers, body: JSON.stringify(body)});
  return [response.status, await response.json()];
}
const post = (path, body) => send("POST", path, body);
const problem = (status, body) => status === 401
  ? "this service needs a token: type it in the token field above"
  : `${status}: ${body.detail || body.title}` + (body.field ? ` (field ${body.field})` : "");
let keyed = null;  // the policy and partition the limits table shows
let matched = null;  // the digest of the context looked up, and the context as typed

function showLimits(name, partition, limits) {
  keyed = {name, partition};
  const body = $("limits").tBodies[0]; body.replaceChildren();
  $("limit-key").textContent = Object.entries(partition).map(([k, v]) => `${k}=${v}`).join(", ");
  const choices = $("limit-rule"); const chosen = choices.value; choices.replaceChildren();
  for (const r of policies[name].rules) {
    if (!(r.rule in limits)) continue;
    const own = limits[r.rule] === r.rate;
    const clear = document.createElement("button"); clear.textContent = "clear";
    clear.className = "clear"; clear.dataset.rule = r.rule; clear.hidden = own;
    clear.addEventListener("click", () => writeLimit("DELETE", r.rule, {context: partition}));
    const td = document.createElement("td"); td.append(clear);
    body.append(row([cell(r.rule), cell(r.written),
      cell(own ? "-" : limits[r.rule] === null ? "exempt" : limits[r.rule]), td]));
    const option = document.createElement("option"); option.textContent = r.rule; choices.append(option);
  }
  if (chosen) choices.value = chosen;
  $("limit").hidden = false;
}

async function writeLimit(method, rule, body) {
  const path = `/v1/policies/${keyed.name}/limits/${encodeURIComponent(rule)}`;
  $("limit-answer").textContent = "sending";
  const [status, answer] = await send(method, path, body);
  if (status !== 200) { $("limit-answer").textContent = problem(status, answer); return; }
  $("limit-answer").textContent = method === "DELETE" ? `cleared ${rule}` : `set ${rule}`;
  showLimits(keyed.name, keyed.partition, answer.limits);
  await lookup();
}

async function setLimit(event) {
  event.preventDefault();
  const exempt = $("limit-exempt").checked, rate = $("limit-rate").value.trim();
  if (!exempt && rate === "") { $("limit-answer").textContent = "give a rate, or tick exempt"; return; }
  const ttlText = $("limit-ttl").value.trim();
  const ttl = ttlText === "" ? null : Number(ttlText);
  await writeLimit("PUT", $("limit-rule").value, {context: keyed.partition, rate: exempt ? null : rate, ttl});
}

async function lookup(event) {
  if (event) event.preventDefault();
  const name = $("policy").value, context = {};
  document.querySelectorAll("#fields input").forEach((input) => {
    if (input.value !== "") context[input.name] = input.value; });
  const [status, decision] = await post(`/v1/policies/${name}/peek`, {context});
  const body = $("usage").tBodies[0]; body.replaceChildren();
  if (status !== 200) {
    $("answer").textContent = status === 401 ? "this service needs a token for lookups"
      : `${status}: ${decision.detail || decision.title}`;
    return;
  }
  const partition = {};
  for (const field of policies[name].partition) if (field in context) partition[field] = context[field];
  const [limitStatus, found] = await post(`/v1/policies/${name}/limits`, {context: partition});
  const limits = (limitStatus === 200 && found.limits) || {};
  if (limitStatus === 200) showLimits(name, partition, limits);
  $("answer").textContent = decision.allowed ? "a hit now would be allowed"
    : `a hit now would be denied by ${decision.denied_by.join(", ")}; retry in ${seconds(decision.retry_after)}`;
  const [deniedStatus, denied] = await post(`/v1/policies/${name}/denials`, {context});
  if (deniedStatus === 200) {  // its digest: the keys denied most show it by the context
    matched = {key: denied.key, text: Object.entries(context).map(([k, v]) => `${k}=${v}`).join(", ")};
    $("answer").textContent += `; denied ${denied.denied} times in the last ${denied.minutes} minutes`;
    await refreshTop();
  }
  for (const r of decision.rules) {
    const own = policies[name].rules.find((x) => x.rule === r.rule);
    const limit = r.rule in limits && (limits[r.rule] === null || limits[r.rule] !== own.rate)
      ? (limits[r.rule] === null ? "exempt" : limits[r.rule]) : "-";
    body.append(row([cell(r.rule), cell(String(r.limit - r.remaining), "n"), cell(String(r.remaining), "n"),
      cell(String(r.limit), "n"), cell(seconds(r.reset_after)),
      cell(r.retry_after ? "in " + seconds(r.retry_after) : "allowed", r.retry_after ? "denied" : "allowed"),
      cell(limit)]));
  }
}

const SVG = "http://www.w3.org/2000/svg";
function chart(series) {
  const width = 600, height = 90, top = Math.max(1, ...series.allowed, ...series.denied);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "chart"); svg.setAttribute("width", width); svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`); svg.dataset.policy = series.policy;
  for (const outcome of ["allowed", "denied"]) {
    const values = series[outcome], step = width / Math.max(1, values.length - 1);
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", outcome); line.dataset.values = values.join(",");
    line.setAttribute("points", values.map((v, i) =>
      `${(i * step).toFixed(1)},${(height - 4 - (v / top) * (height - 8)).toFixed(1)}`).join(" "));
    svg.append(line);
  }
  const peak = document.createElementNS(SVG, "text");
  peak.setAttribute("x", 4); peak.setAttribute("y", 12); peak.setAttribute("font-size", 10);
  peak.textContent = `max ${top}/min`; svg.append(peak);
  return svg;
}

async function refused(response) {  // a problem's detail ("the history is off"), or its status
  const problem = await response.json().catch(() => null);
  return `(${problem && problem.detail ? problem.detail : response.status})`;
}

async function refreshTop() {
  const token = $("token").value;
  const response = await fetch("/v1/stats/top", {headers: token ? {authorization: "Bearer " + token} : {}});
  if (response.status !== 200) { $("top-note").textContent = await refused(response); return; }
  const top = await response.json();
  $("top-note").textContent = top.digested ? "(type the token to match a context looked up)"
    : "(digests: look a context up to see its own)";
  $("top").tBodies[0].replaceChildren(...top.keys.map((k) => {
    const mine = matched !== null && k.key === matched.key;
    const tr = row([cell(k.policy), cell(mine ? matched.text : k.key, mine ? "matched" : ""),
      cell(String(k.denied), "n")]);
    if (mine) tr.dataset.matched = "1";
    return tr;
  }));
}

async function refreshHistory() {
  const response = await fetch("/v1/stats/history");
  if (response.status !== 200) {
    $("history-at").textContent = await refused(response);
    await refreshTop();
    return;
  }
  const history = await response.json(), box = $("history"), parts = [];
  const sum = (values) => values.reduce((a, b) => a + b, 0);
  for (const s of history.series) {
    if (s.rule !== null) continue;
    const title = document.createElement("p");
    const rules = history.series.filter((r) => r.policy === s.policy && r.rule !== null && sum(r.denied))
      .map((r) => `${r.rule} ${sum(r.denied)}`).join(", ");
    title.textContent = `${s.policy}: ${sum(s.allowed)} allowed, ${sum(s.denied)} denied`
      + (rules ? ` (denied by ${rules})` : "");
    title.className = "history-title"; title.dataset.policy = s.policy;
    parts.push(title, chart(s));
  }
  box.replaceChildren(...parts);
  await refreshTop();
  const last = new Date(history.minutes[history.minutes.length - 1] * 1000);
  $("history-at").textContent = `to ${last.toISOString().slice(11, 16)} UTC`;
}

async function load() {
  const listed = await (await fetch("/v1/policies")).json();
  const policyBody = $("policies").tBodies[0];
  for (const p of listed.policies) {
    policies[p.policy] = p;
    const name = p.priorities.length ? `${p.policy} (priorities: ${p.priorities.join(", ")})` : p.policy;
    for (const r of p.rules) policyBody.append(row([cell(name), cell(r.rule),
      cell(r.by.join(", ") || "-"), cell(rateOf(r, p)), cell(r.strategy), cell(notesOf(r, p))]));
    const option = document.createElement("option"); option.textContent = p.policy; $("policy").append(option);
  }
  const stats = await (await fetch("/v1/stats")).json();
  const statsBody = $("stats").tBodies[0];
  for (const s of stats.rows) statsBody.append(row([cell(s.policy), cell(s.rule || "(all)"),
    cell(s.rule ? "" : String(s.allowed), "n"), cell(String(s.denied), "n")]));
  const params = new URLSearchParams(location.search);
  if (params.get("policy")) $("policy").value = params.get("policy");
  fieldsFor($("policy").value);
  $("policy").addEventListener("change", () => fieldsFor($("policy").value));
  $("lookup").addEventListener("submit", lookup);
  $("limit").addEventListener("submit", setLimit);
  const count = listed.policies.length;
  $("status").textContent = `${count} ${count === 1 ? "policy" : "policies"}`;
  if (params.get("policy")) await lookup();
  await refreshHistory();
  setInterval(refreshHistory, 5000);
  document.body.dataset.ready = "1";
}
load();
</script>
</body>
</html>
"""
