// The mensageria console: plain DOM, no build step. Every value from the
// server is set with textContent, never parsed as HTML.
"use strict";

const state = { csrf: "", readOnly: false, operator: "", deadType: "", deadAfter: 0, doubtType: "", doubtAfter: 0, detail: null, timer: 0, types: {} };
const $ = (id) => document.getElementById(id);

// visible shows what a string holds: a bidi override (U+202E), an
// isolate, a zero-width or other invisible format character, a control
// character or a line separator from the server would otherwise act on
// the rendering (a type could read as another name in the confirmation
// dialog), so each is shown as its code point, e.g. ⟨U+202E⟩. Newlines
// and tabs, which the payload's pretty-printing uses, stay.
const invisible = /[\p{Cf}\p{Zl}\p{Zp}\u0000-\u0008\u000B-\u001F\u007F-\u009F]/gu;
function visible(s) {
  return String(s).replace(invisible, (c) => "⟨U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "⟩");
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = visible(text);
  return e;
}

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  if (method !== "GET" && state.csrf) opts.headers["X-CSRF-Token"] = state.csrf;
  const res = await fetch(path, opts);
  const type = res.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await res.json() : null;
  if (!res.ok) {
    const err = new Error((data && (data.detail || data.title)) || res.statusText);
    err.status = res.status;
    err.problem = data;
    throw err;
  }
  return data;
}

function notice(text, cls) {
  const n = $("notice");
  n.textContent = visible(text);
  n.className = cls || "";
}

function age(sec) {
  if (!sec) return "-";
  if (sec < 60) return sec.toFixed(1) + "s";
  if (sec < 3600) return Math.floor(sec / 60) + "m" + Math.floor(sec % 60) + "s";
  if (sec < 86400) return Math.floor(sec / 3600) + "h" + Math.floor((sec % 3600) / 60) + "m";
  return Math.floor(sec / 86400) + "d" + Math.floor((sec % 86400) / 3600) + "h";
}

function spark(values) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 120 24");
  const top = Math.max(1, ...values);
  const pts = values.map((v, i) => (i * 120 / (values.length - 1)).toFixed(1) + "," + (23 - v * 22 / top).toFixed(1));
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts.join(" "));
  svg.appendChild(line);
  const title = document.createElementNS(ns, "title");
  title.textContent = visible("last minute " + values[values.length - 1] + ", peak " + Math.max(...values) + " per minute");
  svg.appendChild(title);
  return svg;
}

function showLogin(message) {
  clearInterval(state.timer);
  $("main").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = visible(message || "");
}

async function start() {
  try {
    const s = await api("GET", "/api/session");
    enter(s);
  } catch (e) {
    showLogin(e.status === 401 ? "" : e.message);
  }
}

function enter(s) {
  state.csrf = s.csrf;
  state.readOnly = s.read_only;
  state.operator = s.operator || "";
  document.body.classList.toggle("read-only", s.read_only);
  $("mode").textContent = visible(s.read_only ? "read-only" : "");
  $("login").hidden = true;
  $("main").hidden = false;
  $("logout").hidden = false;
  refresh();
  clearInterval(state.timer);
  state.timer = setInterval(refresh, 2000);
}

async function refresh() {
  let ov;
  try {
    ov = await api("GET", "/api/overview");
  } catch (e) {
    if (e.status === 401) return showLogin("the session ended; log in again");
    return notice(e.message, "error");
  }
  const counted = new Date(ov.counted_at);
  $("counted").textContent = visible("counted " + counted.toLocaleTimeString() + (ov.count_error ? " (last recount failed: " + ov.count_error + ")" : ""));
  renderApps(ov.apps || []);
  renderTypes(ov.types || []);
  renderInbox(ov.inbox || []);
  // An open message follows its row: a retried letter shows pending, then
  // delivered (or dead again).
  if (state.detail && !$("detail").hidden) openDetail(state.detail.id, true);
}

function renderApps(apps) {
  const body = $("apps").tBodies[0];
  body.replaceChildren(...apps.map((a) => {
    const tr = el("tr", { "data-app": a.app });
    tr.append(el("td", {}, a.app),
      el("td", { class: a.holder ? "holder ok" : "holder warn" }, a.holder || "no holder"),
      el("td", { class: "n" }, a.holder ? String(a.epoch) : "-"),
      el("td", {}, a.since ? new Date(a.since).toLocaleString() : "-"));
    return tr;
  }));
}

// actionable says whether this console acts on a type's dead letters: not
// read-only, and the type's owner among the apps it acts for.
function actionable(type) {
  const t = state.types[type];
  return !!t && t.actionable;
}

function renderTypes(types) {
  state.types = Object.fromEntries(types.map((t) => [t.type, t]));
  if (state.deadType) $("dead").classList.toggle("no-act", !actionable(state.deadType));
  if (state.doubtType) $("doubt").classList.toggle("no-act", !actionable(state.doubtType));
  if (state.detail) $("detail").classList.toggle("no-act", !actionable(state.detail.type));
  const body = $("types").tBodies[0];
  body.replaceChildren(...types.map((t) => {
    const tr = el("tr", { "data-type": t.type });
    if (t.pending > 0) tr.classList.add("hot");
    const dead = el("td", { class: "n dead" });
    if (t.dead > 0) {
      const b = el("button", { class: "open-dead" }, String(t.dead));
      b.addEventListener("click", () => openDead(t.type));
      dead.append(b);
    } else dead.textContent = visible("0");
    // Messages in doubt wait for an operator: marked, and one click away.
    const doubt = el("td", { class: "n in-doubt" });
    if (t.in_doubt > 0) {
      tr.classList.add("in-doubt");
      const b = el("button", { class: "open-doubt", title: "oldest in doubt " + age(t.oldest_in_doubt_seconds) }, String(t.in_doubt));
      b.addEventListener("click", () => openDoubt(t.type));
      doubt.append(b, " ", el("span", { class: "oldest-doubt" }, age(t.oldest_in_doubt_seconds)));
    } else doubt.textContent = visible("0");
    const route = el("td", { class: "route" });
    if (t.route) {
      route.append(el("span", { class: t.route.state === "flowing" ? "ok" : "bad" }, t.route.state));
      route.title = visible(t.route.name) + (t.route.last_error ? "\n" + visible(t.route.last_error) : "") +
        (t.route.until ? "\nnext probe " + new Date(t.route.until).toLocaleTimeString() : "");
      if (t.route.state !== "flowing") route.append(" (" + t.route.failures + " failures)");
    } else route.textContent = visible("-");
    // An operator's pause is intended, not a failure: who and why, and the
    // button that lifts it (or sets one) where this console acts.
    if (t.paused) {
      tr.classList.add("paused");
      const p = el("span", { class: "paused-by bad" }, " paused by " + t.paused.paused_by);
      p.title = visible(t.paused.reason) + "\nsince " + new Date(t.paused.paused_at).toLocaleString();
      route.append(p);
    }
    if (t.actionable) {
      const b = el("button", { class: t.paused ? "resume-route" : "pause-route" }, t.paused ? "resume" : "pause");
      b.addEventListener("click", () => (t.paused ? resumeRoute(t.type) : pauseRoute(t.type)));
      route.append(" ", b);
    }
    tr.append(el("td", { class: "type" }, t.type),
      el("td", { class: t.owner ? "owner" : "owner warn" }, t.owner || "no owner"),
      el("td", { class: "n pending" }, String(t.pending)),
      el("td", { class: "n scheduled" }, String(t.scheduled)),
      el("td", { class: "n in-flight" }, String(t.in_flight)),
      dead,
      doubt,
      el("td", { class: "n oldest" }, age(t.oldest_pending_seconds)),
      el("td", { class: "n delivered" }, String(t.delivered_last_hour)),
      el("td", { class: "chart" }), route);
    tr.querySelector(".chart").append(spark(t.per_minute));
    return tr;
  }));
}

function renderInbox(queues) {
  $("inbox").hidden = queues.length === 0;
  $("queues").tBodies[0].replaceChildren(...queues.map((q) => {
    const tr = el("tr", { "data-consumer": q.consumer });
    tr.append(el("td", {}, q.consumer), el("td", { class: q.owner ? "owner" : "owner warn" }, q.owner || "no owner"),
      el("td", { class: "n pending" }, String(q.pending)), el("td", { class: q.dead > 0 ? "n dead bad" : "n dead" }, String(q.dead)),
      el("td", { class: "n oldest" }, age(q.oldest_pending_seconds)));
    return tr;
  }));
}

async function openDead(type, more) {
  if (!more) {
    state.deadType = type;
    state.deadAfter = 0;
    $("letters").tBodies[0].replaceChildren();
    $("select-all").checked = false;
  }
  $("dead-type").textContent = visible(type);
  $("dead").classList.toggle("no-act", !actionable(type));
  $("dead").hidden = false;
  let page;
  try {
    page = await api("GET", "/api/dead?type=" + encodeURIComponent(type) + "&after=" + state.deadAfter + "&limit=50");
  } catch (e) {
    return notice(e.message, "error");
  }
  const body = $("letters").tBodies[0];
  for (const l of page.letters) {
    const tr = el("tr", { "data-id": String(l.id) });
    const box = el("input", { type: "checkbox", class: "pick act", "aria-label": "select " + l.id });
    const open = el("button", { class: "open" }, "Open");
    open.addEventListener("click", () => openDetail(l.id));
    tr.append(el("td"), el("td", { class: "n" }, String(l.id)), el("td", {}, l.key),
      el("td", { class: "n" }, String(l.attempts)), el("td", {}, new Date(l.created_at).toLocaleString()),
      el("td", { class: "reason" }, l.reason), el("td"));
    tr.cells[0].append(box);
    tr.cells[6].append(open);
    body.append(tr);
  }
  if (body.rows.length === 0) body.append(el("tr", { class: "empty" }, "no dead letters"));
  state.deadAfter = page.next_after || 0;
  $("dead-more").hidden = !page.next_after;
}

async function openDoubt(type, more) {
  if (!more) {
    state.doubtType = type;
    state.doubtAfter = 0;
    $("doubts").tBodies[0].replaceChildren();
    $("doubt-select-all").checked = false;
  }
  $("doubt-type").textContent = visible(type);
  $("doubt").classList.toggle("no-act", !actionable(type));
  $("doubt").hidden = false;
  let page;
  try {
    page = await api("GET", "/api/doubt?type=" + encodeURIComponent(type) + "&after=" + state.doubtAfter + "&limit=50");
  } catch (e) {
    return notice(e.message, "error");
  }
  const body = $("doubts").tBodies[0];
  for (const l of page.letters) {
    const tr = el("tr", { "data-id": String(l.id) });
    const box = el("input", { type: "checkbox", class: "pick act", "aria-label": "select " + l.id });
    const open = el("button", { class: "open" }, "Open");
    open.addEventListener("click", () => openDetail(l.id));
    tr.append(el("td"), el("td", { class: "n" }, String(l.id)), el("td", {}, l.key),
      el("td", { class: "n" }, String(l.attempts)), el("td", {}, l.attempted_at ? new Date(l.attempted_at).toLocaleString() : "-"),
      el("td", { class: "reason" }, l.reason), el("td"));
    tr.cells[0].append(box);
    tr.cells[6].append(open);
    body.append(tr);
  }
  if (body.rows.length === 0) body.append(el("tr", { class: "empty" }, "no messages in doubt"));
  state.doubtAfter = page.next_after || 0;
  $("doubt-more").hidden = !page.next_after;
}

async function openDetail(id, quiet) {
  let m;
  try {
    m = await api("GET", "/api/messages/" + id);
  } catch (e) {
    if (quiet && e.status === 404) {
      $("detail-state").textContent = visible("gone (delivered and deleted, or discarded)");
      for (const b of document.querySelectorAll("#detail .actions button.act")) b.disabled = true;
    }
    return quiet ? undefined : notice(e.message, "error");
  }
  state.detail = m;
  $("detail-id").textContent = visible(String(m.id));
  $("detail-message-id").textContent = visible(m.message_id);
  $("detail-type").textContent = visible(m.type);
  $("detail-key").textContent = visible(m.key);
  $("detail-state").textContent = visible(m.state);
  $("detail-attempts").textContent = visible(String(m.attempts));
  $("detail-reason").textContent = visible(m.reason || "-");
  $("detail-route").textContent = visible(m.route || "-");
  $("detail-payload").textContent = visible(JSON.stringify(m.payload, null, 2));
  $("detail-headers").textContent = visible(JSON.stringify(m.headers, null, 2));
  $("detail-attempted").textContent = visible(m.attempted_at ? new Date(m.attempted_at).toLocaleString() : "-");
  const recs = m.resolutions || [];
  $("detail-resolutions-box").hidden = recs.length === 0;
  $("detail-resolutions").tBodies[0].replaceChildren(...recs.map((r) => {
    const tr = el("tr");
    tr.append(el("td", {}, new Date(r.at).toLocaleString()), el("td", { class: "outcome" }, r.outcome),
      el("td", { class: "by" }, r.by), el("td", { class: "reason" }, r.reason));
    return tr;
  }));
  $("detail").classList.toggle("no-act", !actionable(m.type));
  const dead = m.state === "dead";
  $("retry-one").disabled = !dead;
  $("discard-one").disabled = !dead;
  const inDoubt = m.state === "in_doubt";
  for (const o of ["delivered", "retry", "dead"]) {
    $("resolve-" + o + "-one").hidden = !inDoubt;
    $("resolve-" + o + "-one").disabled = false;
  }
  $("retry-one").hidden = $("discard-one").hidden = inDoubt;
  $("detail").hidden = false;
}

// confirm shows the in-page confirmation and resolves true on Confirm;
// with needReason, it asks for a reason, Confirm stays disabled until one
// is typed, and it resolves to the reason ("" on Cancel).
function confirmAction(text, needReason) {
  return new Promise((resolve) => {
    const d = $("confirm");
    const reason = $("confirm-reason");
    $("confirm-text").textContent = visible(text);
    $("confirm-reason-box").hidden = !needReason;
    reason.value = "";
    const ok = $("confirm-ok");
    ok.disabled = !!needReason;
    reason.oninput = () => { ok.disabled = !!needReason && reason.value.trim() === ""; };
    const done = (v) => (ev) => {
      if (ev) ev.preventDefault();
      ok.onclick = $("confirm-cancel").onclick = d.oncancel = reason.oninput = null;
      ok.disabled = false;
      d.close();
      resolve(v && needReason ? reason.value.trim() : v && !needReason);
    };
    ok.onclick = done(true);
    $("confirm-cancel").onclick = done(false);
    d.oncancel = done(false); // Escape is a cancel
    d.showModal();
  });
}

async function act(verb, body, what) {
  if (!(await confirmAction(verb[0].toUpperCase() + verb.slice(1) + " " + what + "?"))) return;
  try {
    let r;
    try {
      r = await api("POST", "/api/dead/" + verb, body);
    } catch (e) {
      // Dead letters of an at_most_once route whose last attempt may
      // have reached the receiver are sent again only when the operator
      // says so, having read why (ADR 0015).
      if (!(e.problem && e.problem.code === "at_most_once")) throw e;
      if (!(await confirmAction(e.message + "\n\nSend again anyway? The receiver may apply the effect twice."))) return notice("nothing changed", "warn");
      r = await api("POST", "/api/dead/" + verb, Object.assign({}, body, { allow_duplicate: true }));
    }
    notice((verb === "retry" ? "retried " : "discarded ") + r.changed + " dead letter" + (r.changed === 1 ? "" : "s"), "ok");
  } catch (e) {
    notice(verb + " refused: " + e.message, "error");
  }
  if (state.deadType) openDead(state.deadType);
  if (state.detail) openDetail(state.detail.id);
  refresh();
}

function selected(table) {
  return [...document.querySelectorAll("#" + (table || "letters") + " input.pick:checked")].map((b) => Number(b.closest("tr").dataset.id));
}

// resolveDoubt records an operator's decision about messages in doubt,
// under the logged-in operator's name and the reason asked for.
async function resolveDoubt(outcome, ids, what) {
  const reason = await confirmAction("Resolve " + what + " as " + outcome + "? Recorded as decided by " + state.operator + ".", true);
  if (!reason) return;
  try {
    const r = await api("POST", "/api/doubt/resolve", { ids, outcome, reason });
    notice("resolved " + r.resolved.length + " as " + outcome + (r.not_in_doubt.length ? "; not in doubt, left alone: " + r.not_in_doubt.join(", ") : ""), r.not_in_doubt.length ? "warn" : "ok");
  } catch (e) {
    notice("resolve refused: " + e.message, "error");
  }
  if (state.doubtType) openDoubt(state.doubtType);
  if (state.detail) openDetail(state.detail.id, true);
  refresh();
}

// pauseRoute asks why, then pauses a type under the logged-in operator's
// name: no relay of its app claims it until someone resumes it.
async function pauseRoute(type) {
  const reason = await confirmAction("Pause " + type + "? No relay of its app will claim its messages, which stay pending, until it is resumed. Recorded as paused by " + state.operator + ".", true);
  if (!reason) return;
  try {
    await api("POST", "/api/routes/pause", { type, reason });
    notice("paused " + type + "; its relays stop claiming it within a third of their lease", "ok");
  } catch (e) {
    notice("pause refused: " + e.message, "error");
  }
  refresh();
}

async function resumeRoute(type) {
  if (!(await confirmAction("Resume " + type + "? Its relays claim it again."))) return;
  try {
    await api("POST", "/api/routes/resume", { type });
    notice("resumed " + type, "ok");
  } catch (e) {
    notice("resume refused: " + e.message, "error");
  }
  refresh();
}

function wire() {
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = $("token").value;
    const body = token ? { token } : { user: $("user").value, password: $("password").value };
    try {
      enter(await api("POST", "/api/login", body));
      $("token").value = $("password").value = "";
    } catch (e) {
      $("login-error").textContent = visible(e.message);
    }
  });
  $("logout").addEventListener("click", async () => {
    try { await api("POST", "/api/logout"); } catch (e) { /* the session is gone either way */ }
    state.csrf = "";
    showLogin("logged out");
  });
  $("dead-close").addEventListener("click", () => { $("dead").hidden = true; state.deadType = ""; });
  $("detail-close").addEventListener("click", () => { $("detail").hidden = true; state.detail = null; });
  $("dead-more").addEventListener("click", () => openDead(state.deadType, true));
  $("doubt-close").addEventListener("click", () => { $("doubt").hidden = true; state.doubtType = ""; });
  $("doubt-more").addEventListener("click", () => openDoubt(state.doubtType, true));
  $("doubt-select-all").addEventListener("change", (ev) => {
    for (const b of document.querySelectorAll("#doubts input.pick")) b.checked = ev.target.checked;
  });
  for (const o of ["delivered", "retry", "dead"]) {
    $("resolve-" + o + "-one").addEventListener("click", () => resolveDoubt(o, [state.detail.id], "message " + state.detail.id));
    $("resolve-" + o + "-selected").addEventListener("click", () => {
      const ids = selected("doubts");
      if (ids.length === 0) return notice("select messages in doubt first", "warn");
      resolveDoubt(o, ids, ids.length + " selected message" + (ids.length === 1 ? "" : "s") + " in doubt");
    });
  }
  $("select-all").addEventListener("change", (ev) => {
    for (const b of document.querySelectorAll("#letters input.pick")) b.checked = ev.target.checked;
  });
  $("retry-one").addEventListener("click", () => act("retry", { ids: [state.detail.id] }, "message " + state.detail.id));
  $("discard-one").addEventListener("click", () => act("discard", { ids: [state.detail.id] }, "message " + state.detail.id + " for good"));
  for (const verb of ["retry", "discard"]) {
    $(verb + "-selected").addEventListener("click", () => {
      const ids = selected();
      if (ids.length === 0) return notice("select dead letters first", "warn");
      act(verb, { ids }, ids.length + " selected dead letter" + (ids.length === 1 ? "" : "s"));
    });
    $(verb + "-all").addEventListener("click", () =>
      act(verb, { type: state.deadType, all: true }, "every dead letter of " + state.deadType));
  }
}

wire();
start();
