// chatgate console: reads /api/overview every few seconds and draws it;
// an administrator creates, edits, rotates and revokes keys through the
// admin API (/api/keys), each change sent with the session's CSRF token.
// No library, no other origin, no inline script or style (the page's
// Content-Security-Policy allows none): charts are SVG built here.
"use strict";

const REFRESH_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";

const state = {
  data: null,
  sort: { field: "name", descending: false },
  openKey: null,
  // Answers for a key opened before the current one are dropped.
  keyAsk: 0,
  filter: "",
  ticks: 0,
  // The audit trail's next page (null: no older records).
  auditBefore: null,
  // The key being edited, and its fields as loaded (only what changes is sent).
  editing: null,
  loaded: null,
  // The key a confirmation is for, and what it does.
  confirming: null,
};

// Who is signed in: whether they may change keys, and the CSRF token
// every change carries.
const session = { actor: "", admin: false, csrf: null };

// ---- formatting -------------------------------------------------------

function int(n) {
  return Number(n || 0).toLocaleString("en-US");
}

// A nano-dollar amount as USD, exact, without trailing zeros past cents.
function usd(nano) {
  const n = BigInt(nano || 0);
  const whole = n / 1000000000n;
  let frac = (n % 1000000000n).toString().padStart(9, "0").replace(/0+$/, "");
  if (frac.length < 2) frac = frac.padEnd(2, "0");
  return `${whole}.${frac}`;
}

function ms(v) {
  if (v === null || v === undefined) return "–";
  return v < 1 ? v.toFixed(3) : v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
}

function num(v, digits) {
  return Number(v || 0).toFixed(digits);
}

function time(iso) {
  return iso ? iso.replace("T", " ").replace(/\.\d+Z$/, "Z") : "";
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// ---- charts -----------------------------------------------------------

const CHARTS = [
  { id: "rps", title: "Requests per second", series: [["rps", "requests/s", (v) => num(v, 1)]] },
  { id: "errors", title: "Error rate (5xx, %)", series: [["error_pct", "errors %", (v) => num(v, 1)]] },
  {
    id: "inflight", title: "In flight",
    series: [["in_flight", "requests", (v) => int(v)], ["streams", "streams open", (v) => int(v)]],
  },
  {
    id: "overhead", title: "Gateway overhead before the provider (ms)",
    series: [["overhead_p50_ms", "p50", ms], ["overhead_p99_ms", "p99", ms]],
  },
  {
    id: "ttfb", title: "Time to first byte (ms)",
    series: [["ttfb_p50_ms", "p50", ms], ["ttfb_p99_ms", "p99", ms]],
  },
];

const W = 600, H = 130, PAD_L = 44, PAD_B = 16, PAD_T = 6;

function buildCharts() {
  const host = document.getElementById("charts");
  for (const c of CHARTS) {
    const caption = el("figcaption", { id: `chart-${c.id}-cap` }, c.title, el("span", { class: "now", id: `chart-${c.id}-now` }));
    const box = svg("svg", {
      class: "chart", viewBox: `0 0 ${W} ${H}`,
      role: "img", "aria-labelledby": `chart-${c.id}-cap chart-${c.id}-sum`, id: `chart-${c.id}-svg`,
    });
    const legend = el("div", { class: "legend", "aria-hidden": "true" },
      ...c.series.map((s, i) => el("span", { class: `k${i}` }, s[1])));
    const summary = el("p", { class: "sr-only", id: `chart-${c.id}-sum`, hidden: "" });
    const head = el("tr", {}, el("th", { scope: "col" }, "Time (UTC)"), ...c.series.map((s) => el("th", { scope: "col" }, s[1])));
    const table = el("table", { id: `chart-${c.id}-table` },
      el("caption", {}, `${c.title}: the last two minutes, every ten seconds`), el("thead", {}, head), el("tbody"));
    host.append(el("figure", { id: `chart-${c.id}` }, caption, box, legend, summary,
      el("details", {}, el("summary", {}, "Data"), table)));
  }
}

function drawChart(c, points) {
  const box = document.getElementById(`chart-${c.id}-svg`);
  box.replaceChildren();
  const values = c.series.map(([k]) => points.map((p) => p[k]));
  let max = 0;
  for (const vs of values) for (const v of vs) if (v !== null && v > max) max = v;
  max = max > 0 ? max * 1.1 : 1;
  const x = (i) => PAD_L + (i * (W - PAD_L - 4)) / Math.max(points.length - 1, 1);
  const y = (v) => PAD_T + (H - PAD_T - PAD_B) * (1 - v / max);
  for (const f of [0, 0.5, 1]) {
    const yy = y(max * f);
    box.append(svg("line", { class: "grid", x1: PAD_L, x2: W, y1: yy, y2: yy }));
    const label = svg("text", { class: "axis", x: PAD_L - 4, y: yy + 3, "text-anchor": "end" });
    label.textContent = c.series[0][2](max * f);
    box.append(label);
  }
  const left = svg("text", { class: "axis", x: PAD_L, y: H - 2 });
  left.textContent = "−60 min";
  const right = svg("text", { class: "axis", x: W - 2, y: H - 2, "text-anchor": "end" });
  right.textContent = "now";
  box.append(left, right);
  values.forEach((vs, si) => {
    // A gap (no requests in a slot) breaks a percentile line.
    let path = "";
    let pen = false;
    vs.forEach((v, i) => {
      if (v === null || v === undefined) { pen = false; return; }
      path += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    });
    if (path) box.append(svg("path", { class: `s${si}`, d: path }));
  });
  // The text equivalent: the latest value, and the hour's peak.
  const last = points[points.length - 2] || points[points.length - 1] || {};
  const now = c.series.map(([k, label, f]) => `${label} ${f(last[k])}`).join(", ");
  const peaks = c.series.map(([k, label, f], si) => {
    const vs = values[si].filter((v) => v !== null && v !== undefined);
    return `${label} ${vs.length ? f(Math.max(...vs)) : "–"}`;
  }).join(", ");
  document.getElementById(`chart-${c.id}-now`).textContent = `last 10 s: ${now}`;
  document.getElementById(`chart-${c.id}-sum`).textContent =
    `${c.title} over the last hour. Last ten seconds: ${now}. Highest: ${peaks}.`;
  const body = document.querySelector(`#chart-${c.id}-table tbody`);
  body.replaceChildren(...points.slice(-12).map((p) =>
    el("tr", {}, el("td", {}, time(new Date(p.t * 1000).toISOString())),
      ...c.series.map(([k, , f]) => el("td", {}, f(p[k]))))));
}

// ---- tables -----------------------------------------------------------

function budgetUsed(k) {
  return k.budget ? Number(k.budget.spent_nano_usd) / Number(k.budget.limit_nano_usd || 1) : -1;
}

function cell(field, text, cls) {
  return el("td", { dataset: { field }, class: cls || "" }, text);
}

function keyRow(k) {
  const used = budgetUsed(k);
  let budget = "none";
  if (k.budget) {
    const over = k.budget.spent_nano_usd >= k.budget.limit_nano_usd;
    const meter = el("meter", {
      min: "0", max: String(k.budget.limit_nano_usd), value: String(Math.min(k.budget.spent_nano_usd, k.budget.limit_nano_usd)),
      high: String(k.budget.limit_nano_usd * 0.8), optimum: "0",
      "aria-label": `${k.name}: ${Math.round(used * 100)}% of its budget used`,
    });
    budget = el("span", {}, meter,
      `${usd(k.budget.spent_nano_usd)} of ${usd(k.budget.limit_nano_usd)} (${k.budget.period})${over ? " over budget" : ""}`);
  }
  const open = el("button", { type: "button", class: "key-open", "aria-expanded": String(state.openKey === k.name) }, k.name);
  open.addEventListener("click", () => openKey(k.name).catch(showFailure));
  const tr = el("tr", { dataset: { key: k.name } },
    el("th", { scope: "row", class: "text" }, open),
    cell("requests", int(k.requests)),
    cell("prompt_tokens", int(k.prompt_tokens)),
    cell("completion_tokens", int(k.completion_tokens)),
    cell("reasoning_tokens", int(k.reasoning_tokens)),
    cell("cached_tokens", int(k.cached_tokens)),
    cell("cost", usd(k.cost_nano_usd)),
    cell("budget", budget, "text"),
    cell("rate_limited", int(k.rate_limited)),
    cell("budget_refused", int(k.budget_refused)),
    cell("in_flight", k.max_in_flight ? `${int(k.in_flight)} of ${int(k.max_in_flight)}` : int(k.in_flight)),
    actionsCell(k));
  if (k.budget && used >= 1) tr.classList.add("over-budget");
  else if (k.budget && used >= 0.8) tr.classList.add("near-budget");
  return tr;
}

function actionsCell(k) {
  const td = el("td", { class: "actions admin-only", dataset: { field: "actions" } });
  if (!k.configured) return td;
  const button = (label, what) => {
    const b = el("button", { type: "button", class: `key-${what}`, "aria-label": `${label} ${k.name}` }, label);
    b.addEventListener("click", () => (what === "edit" ? openForm(k.name) : openConfirm(k.name, what)).catch(showFailure));
    return b;
  };
  td.append(button("Edit", "edit"), button("Rotate", "rotate"), button("Revoke", "revoke"));
  return td;
}

function sortedKeys(keys) {
  const { field, descending } = state.sort;
  const value = (k) => (field === "name" ? k.name : field === "budget_used" ? budgetUsed(k) : Number(k[field] || 0));
  return [...keys].sort((a, b) => {
    const va = value(a), vb = value(b);
    const c = va < vb ? -1 : va > vb ? 1 : a.name < b.name ? -1 : 1;
    return descending ? -c : c;
  });
}

function drawKeys(all) {
  const body = document.querySelector("#keys-table tbody");
  const keys = all.filter((k) => k.name.toLowerCase().includes(state.filter));
  if (!keys.length) {
    const text = all.length ? "No key matches the filter." : "No keys yet.";
    body.replaceChildren(el("tr", {}, el("td", { colspan: "12", class: "empty" }, text)));
    return;
  }
  // Keep the focus on a key's button across a refresh.
  const focused = document.activeElement && document.activeElement.closest("tr[data-key]");
  const focusKey = focused && document.activeElement.classList.contains("key-open") ? focused.dataset.key : null;
  body.replaceChildren(...sortedKeys(keys).map(keyRow));
  if (focusKey) {
    const b = body.querySelector(`tr[data-key="${CSS.escape(focusKey)}"] .key-open`);
    if (b) b.focus();
  }
}

function setupSorting() {
  for (const th of document.querySelectorAll("#keys-table th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => {
      const field = th.dataset.sort;
      state.sort = {
        field,
        descending: state.sort.field === field ? !state.sort.descending : field !== "name",
      };
      for (const other of document.querySelectorAll("#keys-table th[data-sort]")) other.removeAttribute("aria-sort");
      th.setAttribute("aria-sort", state.sort.descending ? "descending" : "ascending");
      if (state.data) drawKeys(state.data.keys);
    });
  }
}

function failuresText(failures) {
  const parts = Object.entries(failures || {}).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${int(n)}`);
  return parts.length ? parts.join(", ") : "none";
}

function drawModels(models) {
  const body = document.querySelector("#models-table tbody");
  if (!models.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: "9", class: "empty" }, "No requests today.")));
    return;
  }
  body.replaceChildren(...models.map((m) => el("tr", { dataset: { model: m.model } },
    el("th", { scope: "row", class: "text" }, m.configured ? m.model : `${m.model} (not in the catalogue)`),
    cell("requests", int(m.requests)),
    cell("prompt_tokens", int(m.prompt_tokens)),
    cell("completion_tokens", int(m.completion_tokens)),
    cell("reasoning_tokens", int(m.reasoning_tokens)),
    cell("cached_tokens", int(m.cached_tokens)),
    cell("cost", usd(m.cost_nano_usd)),
    cell("fallbacks", int(m.fallbacks)),
    cell("errors", int(m.errors)))));
}

function modelsText(models) {
  return (models || []).map((m) => (m.sent_as === m.id ? m.id : `${m.id} (as ${m.sent_as})`)).join(", ");
}

function drawProviders(providers) {
  const body = document.querySelector("#providers-table tbody");
  body.replaceChildren(...providers.map((p) => {
    let st = p.state;
    const why = p.reason ? ` (${p.reason})` : "";
    if (p.state === "ejected") {
      st = p.ejected_until ? `ejected until ${time(p.ejected_until)}${why}` : `ejected${why}, a trial request is due`;
    }
    return el("tr", { dataset: { endpoint: p.name } },
      el("th", { scope: "row", class: "text" }, p.name),
      cell("url", p.url, "text mono"),
      cell("models", modelsText(p.models), "text"),
      cell("state", st, `text state-${p.state}`),
      cell("in_flight", int(p.in_flight)),
      cell("requests", int(p.requests)),
      cell("failures", failuresText(p.failures), "text"),
      cell("ttfb_p50", ms(p.ttfb_p50_ms)),
      cell("ttfb_p99", ms(p.ttfb_p99_ms)));
  }));
}

function drawFailures(failures) {
  const body = document.querySelector("#failures-table tbody");
  if (!failures.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: "6", class: "empty" }, "No failures.")));
    return;
  }
  body.replaceChildren(...failures.map((f) => el("tr", { dataset: { request: f.request_id } },
    el("td", { class: "text" }, time(f.ts)),
    cell("key", f.key, "text"),
    cell("status", f.status),
    cell("error", f.error || (f.status < 400 ? "incomplete" : ""), "text"),
    cell("endpoint", f.endpoint || "", "text"),
    cell("request_id", f.request_id, "text mono"))));
}

function drawGauges(d) {
  const last = d.points[d.points.length - 2] || {};
  const items = [
    ["Requests/s (last 10 s)", num(last.rps, 1)],
    ["Errors (last 10 s)", `${num(last.error_pct, 1)} %`],
    ["Requests in flight", int(d.gauges.in_flight)],
    ["Streams open", int(d.gauges.streams)],
    ["Connections", int(d.gauges.connections)],
  ];
  document.getElementById("gauges").replaceChildren(...items.map(([k, v]) =>
    el("div", {}, el("dt", {}, k), el("dd", {}, v))));
}

// ---- a key's 24 hours -------------------------------------------------

// Opens a key's 24 hours (and moves the focus there), or, with
// `focus` false, redraws the open key's hours on a refresh.
async function openKey(name, focus = true) {
  const ask = ++state.keyAsk;
  state.openKey = name;
  const res = await fetch(`/api/keys/${encodeURIComponent(name)}`, { cache: "no-store" });
  if (res.status === 401) { location.reload(); return; }
  if (!res.ok) return;
  const d = await res.json();
  if (ask !== state.keyAsk || state.openKey !== name) return;
  const section = document.getElementById("key-detail");
  const heading = document.getElementById("key-detail-h");
  heading.textContent = `${d.key}: the last 24 hours`;
  document.querySelector("#key-hours tbody").replaceChildren(...d.hours.map((h) => el("tr", {},
    el("td", { class: "text" }, time(h.hour).slice(0, 16)),
    el("td", {}, int(h.requests)), el("td", {}, int(h.prompt_tokens)), el("td", {}, int(h.completion_tokens)),
    el("td", {}, int(h.reasoning_tokens)), el("td", {}, int(h.cached_tokens)), el("td", {}, usd(h.cost_nano_usd)),
    el("td", {}, int(h.rate_limited)), el("td", {}, int(h.budget_refused)), el("td", {}, int(h.errors)))));
  const max = Math.max(1, ...d.hours.map((h) => h.requests));
  const box = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": `Requests per hour for ${d.key} over the last 24 hours; the table below has every hour.` });
  d.hours.forEach((h, i) => {
    const bw = (W - PAD_L) / 24;
    const bh = ((H - PAD_T - PAD_B) * h.requests) / max;
    box.append(svg("rect", { class: "bar", x: PAD_L + i * bw + 1, y: H - PAD_B - bh, width: bw - 2, height: bh }));
  });
  const top = svg("text", { class: "axis", x: PAD_L - 4, y: PAD_T + 8, "text-anchor": "end" });
  top.textContent = int(max);
  const left = svg("text", { class: "axis", x: PAD_L, y: H - 2 });
  left.textContent = "−24 h";
  const right = svg("text", { class: "axis", x: W - 2, y: H - 2, "text-anchor": "end" });
  right.textContent = "this hour";
  box.append(top, left, right);
  document.getElementById("key-chart").replaceChildren(box);
  section.hidden = false;
  if (focus) {
    heading.focus();
    if (state.data) drawKeys(state.data.keys);
  }
}

function closeKey() {
  const name = state.openKey;
  state.openKey = null;
  state.keyAsk++;
  document.getElementById("key-detail").hidden = true;
  if (state.data) drawKeys(state.data.keys);
  const b = name && document.querySelector(`#keys-table tr[data-key="${CSS.escape(name)}"] .key-open`);
  if (b) b.focus();
}

// ---- changing keys ----------------------------------------------------

// One call of the admin API: its JSON (null for 204), or an Error with
// the API's own message.
async function api(method, path, body) {
  const headers = { "X-CSRF-Token": session.csrf || "" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method, headers, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 401) { location.reload(); throw new Error("signed out"); }
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (!res.ok) throw new Error(data && data.error ? data.error.message : `status ${res.status}`);
  return data;
}

async function loadSession() {
  const s = await api("GET", "/api/session");
  Object.assign(session, s);
  document.body.dataset.admin = String(Boolean(s.admin));
  document.getElementById("who").textContent =
    `Signed in as ${s.actor.replace(/^(token|user):/, "")}${s.admin ? "" : " (may look, not change)"}`;
}

const FORM_FIELDS = ["rpm", "tpm", "budget_usd", "budget_period", "max_in_flight", "models"];

// The form's value of a field as the API takes it (null: the default).
function formValue(field) {
  const v = document.querySelector(`#key-form [name="${field}"]`).value.trim();
  if (v === "") return null;
  if (field === "budget_period") return v;
  if (field === "models") return v.split(",").map((m) => m.trim()).filter((m) => m);
  return Number(v);
}

function setField(field, v) {
  document.querySelector(`#key-form [name="${field}"]`).value =
    v === null || v === undefined ? "" : Array.isArray(v) ? v.join(", ") : String(v);
}

// Opens the form for a new key (no name) or to edit `name`.
async function openForm(name) {
  const dialog = document.getElementById("key-form");
  document.getElementById("key-form-message").textContent = "";
  state.editing = name || null;
  state.loaded = null;
  document.getElementById("key-form-name-row").hidden = Boolean(name);
  document.getElementById("f-name").required = !name;
  document.getElementById("key-form-h").textContent = name ? `Edit ${name}` : "New key";
  document.getElementById("key-form-save").textContent = name ? "Save" : "Create";
  document.getElementById("f-name").value = "";
  for (const f of FORM_FIELDS) setField(f, null);
  if (name) {
    const k = await api("GET", `/api/keys/${encodeURIComponent(name)}`);
    const fields = {
      rpm: k.rpm, tpm: k.tpm, budget_usd: k.budget ? Number(k.budget.usd) : null,
      budget_period: k.budget ? k.budget.period : null, max_in_flight: k.max_in_flight, models: k.models,
    };
    for (const f of FORM_FIELDS) setField(f, fields[f]);
    state.loaded = Object.fromEntries(FORM_FIELDS.map((f) => [f, JSON.stringify(formValue(f))]));
  }
  dialog.showModal();
  (name ? document.getElementById("f-rpm") : document.getElementById("f-name")).focus();
}

async function saveForm(e) {
  e.preventDefault();
  const message = document.getElementById("key-form-message");
  message.textContent = "";
  const body = {};
  for (const f of FORM_FIELDS) {
    const v = formValue(f);
    // When editing, only what changed: an untouched default stays a default.
    if (!state.loaded || state.loaded[f] !== JSON.stringify(v)) body[f] = v;
  }
  try {
    let k;
    if (state.editing) {
      if (!Object.keys(body).length) { message.textContent = "Nothing changed."; return; }
      k = await api("PATCH", `/api/keys/${encodeURIComponent(state.editing)}`, body);
      notice(`Saved ${k.name}.`);
    } else {
      for (const f of Object.keys(body)) if (body[f] === null) delete body[f];
      body.name = document.getElementById("f-name").value.trim();
      k = await api("POST", "/api/keys", body);
      notice(`Created ${k.name}.`);
    }
    document.getElementById("key-form").close();
    if (k.secret) showSecret(k.name, k.secret);
    changed();
  } catch (err) {
    message.textContent = err.message;
  }
}

function openConfirm(name, what) {
  state.confirming = { name, what };
  document.getElementById("key-confirm-message").textContent = "";
  document.getElementById("key-confirm-h").textContent = what === "rotate" ? `Rotate ${name}` : `Revoke ${name}`;
  document.getElementById("key-confirm-text").textContent = what === "rotate"
    ? `A new secret for ${name}, with the same limits. Its clients must switch to it before the current one stops working.`
    : `Every secret of ${name} is refused at once, on every instance. This cannot be undone (a new key can be created).`;
  document.getElementById("key-confirm-grace-row").hidden = what !== "rotate";
  document.getElementById("f-grace").value = "24h";
  document.getElementById("key-confirm-ok").textContent = what === "rotate" ? "Rotate" : "Revoke";
  document.getElementById("key-confirm").showModal();
  document.getElementById("key-confirm-cancel").focus();
  return Promise.resolve();
}

async function confirmed(e) {
  e.preventDefault();
  const { name, what } = state.confirming;
  const path = `/api/keys/${encodeURIComponent(name)}`;
  try {
    if (what === "rotate") {
      const k = await api("POST", `${path}/rotate`, { grace: document.getElementById("f-grace").value.trim() });
      document.getElementById("key-confirm").close();
      notice(`Rotated ${name}: the previous secret works until ${time(k.previous_secret_expires)}.`);
      showSecret(name, k.secret);
    } else {
      await api("DELETE", path);
      document.getElementById("key-confirm").close();
      notice(`Revoked ${name}.`);
    }
    changed();
  } catch (err) {
    document.getElementById("key-confirm-message").textContent = err.message;
  }
}

function showSecret(name, secret) {
  document.getElementById("secret-name").textContent = name;
  const input = document.getElementById("secret-value");
  input.value = secret;
  document.getElementById("secret-copied").textContent = "";
  document.getElementById("key-secret").showModal();
  input.focus();
  input.select();
}

async function copySecret() {
  const input = document.getElementById("secret-value");
  const said = document.getElementById("secret-copied");
  try {
    await navigator.clipboard.writeText(input.value);
    said.textContent = "Copied to the clipboard.";
  } catch {
    // No clipboard API (a page not served from localhost or HTTPS).
    input.select();
    said.textContent = document.execCommand("copy") ? "Copied to the clipboard." : "Select the text and copy it.";
  }
}

function closeSecret() {
  const input = document.getElementById("secret-value");
  input.value = "";
  document.getElementById("key-secret").close();
}

function notice(text) {
  document.getElementById("key-notice").textContent = text;
}

// After a change: the keys and the trail again, now.
function changed() {
  loadAudit(true).catch(showFailure);
  if (state.openKey) closeKey();
}

// ---- the audit trail --------------------------------------------------

function valueText(v) {
  if (v === null || v === undefined) return "default";
  return Array.isArray(v) ? v.join(", ") : String(v);
}

function changesText(action, changes) {
  if (action === "revoke") {
    const n = changes.length && changes[0].field === "secrets" ? changes[0].before : 1;
    return `every secret refused (${n})`;
  }
  if (!changes.length) return "";
  return changes.map((c) => (c.before === null ? `${c.field} ${valueText(c.after)}`
    : `${c.field} ${valueText(c.before)} → ${valueText(c.after)}`)).join("; ");
}

// The newest page again (`reset`), or the next older one.
async function loadAudit(reset) {
  const before = reset ? "" : `&before=${state.auditBefore}`;
  const d = await api("GET", `/api/audit?limit=20${before}`);
  const rows = d.records.map((r) => el("tr", { dataset: { audit: String(r.id) } },
    el("td", { class: "text" }, time(r.at)),
    cell("actor", r.actor, "text"),
    cell("address", r.address || "", "text"),
    cell("action", r.action, "text"),
    cell("key", r.key, "text"),
    cell("changes", changesText(r.action, r.changes), "text")));
  const body = document.querySelector("#audit-table tbody");
  if (reset) {
    body.replaceChildren(...(rows.length ? rows
      : [el("tr", {}, el("td", { colspan: "6", class: "empty" }, "No changes yet."))]));
  } else {
    body.append(...rows);
  }
  state.auditBefore = d.next_before;
  document.getElementById("audit-more").hidden = !d.next_before;
}

// ---- refresh ----------------------------------------------------------

function showFailure(e) {
  document.getElementById("status").textContent = `Not updated: ${e.message}; retrying`;
}

async function refresh() {
  try {
    const res = await fetch("/api/overview", { cache: "no-store" });
    if (res.status === 401) { location.reload(); return; }
    if (!res.ok) throw new Error(`status ${res.status}`);
    const d = await res.json();
    state.data = d;
    document.getElementById("scope").textContent = `Figures of ${d.scope}.`;
    drawGauges(d);
    for (const c of CHARTS) drawChart(c, d.points);
    drawKeys(d.keys);
    drawModels(d.models || []);
    drawProviders(d.providers);
    drawFailures(d.failures);
    if (state.openKey) openKey(state.openKey, false).catch(showFailure);
    // The trail's newest page every ten seconds, unless older pages are open.
    if (++state.ticks % 5 === 0 && document.querySelectorAll("#audit-table tbody tr").length <= 20) {
      loadAudit(true).catch(showFailure);
    }
    document.getElementById("updated").textContent = `Updated ${time(d.now)}`;
    document.getElementById("status").textContent = "";
    document.body.dataset.updated = d.now;
  } catch (e) {
    // Only a failure is announced (the status region), not every update.
    showFailure(e);
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  buildCharts();
  setupSorting();
  document.getElementById("key-filter").addEventListener("input", (e) => {
    state.filter = e.target.value.trim().toLowerCase();
    if (state.data) drawKeys(state.data.keys);
  });
  document.getElementById("key-new").addEventListener("click", () => openForm(null).catch(showFailure));
  document.getElementById("key-form-form").addEventListener("submit", saveForm);
  document.getElementById("key-form-cancel").addEventListener("click", () => document.getElementById("key-form").close());
  document.getElementById("key-confirm-form").addEventListener("submit", confirmed);
  document.getElementById("key-confirm-cancel").addEventListener("click", () => document.getElementById("key-confirm").close());
  document.getElementById("secret-copy").addEventListener("click", () => copySecret());
  document.getElementById("secret-done").addEventListener("click", closeSecret);
  document.getElementById("key-secret").addEventListener("close", closeSecret);
  document.getElementById("audit-more").addEventListener("click", () => loadAudit(false).catch(showFailure));
  loadSession().then(() => loadAudit(true)).catch(showFailure);
  document.getElementById("key-close").addEventListener("click", closeKey);
  document.addEventListener("keydown", (e) => {
    // Escape closes an open dialog first (the browser does that).
    if (e.key === "Escape" && state.openKey && !document.querySelector("dialog[open]")) closeKey();
  });
  refresh();
});
