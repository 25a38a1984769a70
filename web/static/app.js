// Tollgate's web page: chat with streamed turn events, a timeline, and approval chips.
// No build step. Every server string is inserted with textContent, except the assistant's replies,
// which are markdown: parsed by the vendored marked, then sanitized by the vendored DOMPurify.
"use strict";

const TOKEN_KEY = "tollgate.token";
const THREAD_KEY = "tollgate.thread";
const TERMINAL = new Set(["message_complete", "approval_required"]);
const RECONNECTS = 3;

const $ = (selector, root = document) => root.querySelector(selector);

const state = {
  token: localStorage.getItem(TOKEN_KEY) || "",
  threadId: localStorage.getItem(THREAD_KEY) || null,
  busy: false,
  kind: "chat",       // which threads the list shows: chat, run or inbox
  search: "",
  running: null,      // the AbortController of the turn in flight
};

const timeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const when = (iso) => (iso ? timeFormat.format(new Date(iso)) : "");

// A reply quotes third-party text (an event title, a subject, a page): it may format (bold, lists,
// code) but never turns into a live link, an image or HTML. Links and images are shown as their
// text and address; raw HTML as the text it is.
const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const inertMarkdown = {
  link({ tokens, href }) {
    const label = this.parser.parseInline(tokens);
    return label === escapeHtml(href) ? label : `${label} (${escapeHtml(href)})`;
  },
  image({ text, href }) { return `[image: ${escapeHtml(text)} (${escapeHtml(href)})]`; },
  html({ text }) { return escapeHtml(text); },
};
if (window.marked) window.marked.use({ renderer: inertMarkdown });

// Markdown to safe HTML: DOMPurify drops scripts, handlers and javascript: links from marked's output.
function setMarkdown(el, text) {
  if (window.marked && window.DOMPurify) {
    el.innerHTML = window.DOMPurify.sanitize(window.marked.parse(text, { gfm: true, breaks: true }),
                                             { FORBID_TAGS: ["a", "img", "picture", "svg", "iframe", "form"] });
    el.classList.add("markdown");
  } else {
    el.textContent = text;
  }
}

// ---- status line --------------------------------------------------------------------------

function setStatus(text, kind = "") {
  const el = $("#status");
  el.textContent = text;
  el.className = "status " + kind;
}

// ---- HTTP ---------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

async function api(path, { method = "GET", body, accept = "application/json", headers = {}, signal } = {}) {
  const init = { method, headers: { Accept: accept, ...headers }, signal };
  if (state.token) init.headers.Authorization = `Bearer ${state.token}`;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let payload = null;
    try { payload = await response.json(); } catch (_) { /* not JSON */ }
    if (response.status === 401) setStatus("Paste a valid API token above.", "bad");
    if (response.status === 429) setStatus(`Slow down: retry in ${response.headers.get("Retry-After")} s.`, "bad");
    throw new ApiError(response.status, payload);
  }
  return response;
}

// Parse a text/event-stream body into {id, event, data} messages.
async function* readSse(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    const blocks = buffer.split(/\r\n\r\n|\n\n|\r\r/);
    buffer = blocks.pop();
    for (const block of blocks) {
      const message = { id: null, event: "message", data: "" };
      const data = [];
      for (const line of block.split(/\r\n|\n|\r/)) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") data.push(value);
        else if (field === "event") message.event = value;
        else if (field === "id") message.id = value;
      }
      if (data.length) {
        message.data = data.join("\n");
        yield message;
      }
    }
  }
}

// Consume a run's stream; on a dropped connection, reconnect with Last-Event-ID.
async function consumeRun(response, view) {
  let last = null;
  let attempts = 0;
  for (;;) {
    try {
      for await (const message of readSse(response)) {
        const event = JSON.parse(message.data);
        last = event;
        view.event(event);
        if (TERMINAL.has(event.type)) return;
        if (event.type === "error" && event.data.fatal) {  // the run failed mid-stream
          view.fail(event.data.message);
          return;
        }
      }
      return;
    } catch (err) {
      if (!last || attempts >= RECONNECTS) throw err;
      attempts += 1;
      setStatus(`Connection lost; reconnecting (${attempts})…`, "warn");
      await new Promise((resolve) => setTimeout(resolve, 1000 * attempts));
      // The event's id in the log is global: it alone says where the stream left off.
      response = await api(`/v1/threads/${encodeURIComponent(last.thread_id)}/events`, {
        accept: "text/event-stream",
        headers: { "Last-Event-ID": String(last.id) },
      });
    }
  }
}

// ---- rendering ----------------------------------------------------------------------------

function addMessage(role, text, at = new Date().toISOString()) {
  const li = document.createElement("li");
  li.className = `msg ${role}`;
  const bubble = document.createElement("div");
  bubble.className = "bubble";
  if (role === "assistant") setMarkdown(bubble, text); else bubble.textContent = text;
  const meta = document.createElement("div");
  meta.className = "meta";
  const time = document.createElement("time");
  time.dateTime = at;
  time.textContent = when(at);
  meta.append(time);
  if (role === "assistant") {
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "small copy";
    copy.textContent = "Copy";
    copy.title = "Copy this reply";
    copy.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(bubble.dataset.text || bubble.textContent);
        copy.textContent = "Copied";
      } catch (_) { copy.textContent = "Copy failed"; }
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    });
    meta.append(copy);
  }
  bubble.dataset.text = text;
  li.append(bubble, meta);
  $("#messages").append(li);
  li.scrollIntoView({ block: "end" });
  return li;
}

// A decided or closed approval from the thread's history: what was asked, and what became of it.
function addDecided(a) {
  const li = document.createElement("li");
  li.className = "msg assistant";
  const card = document.createElement("div");
  card.className = "chip decided history";
  const head = document.createElement("div");
  head.className = "chip-head";
  const badge = document.createElement("span");
  badge.className = `badge status-${a.status}`;
  badge.textContent = a.status;
  const code = document.createElement("code");
  code.textContent = `${a.tool}.${a.action}`;
  head.append(badge, code);
  const preview = document.createElement("p");
  preview.className = "chip-preview";
  preview.textContent = a.preview;
  const said = document.createElement("p");
  said.className = "chip-state";
  const via = { chat: "the web page or API", cli: "the terminal", studio: "Studio", background: "a background run" };
  said.textContent = a.decision
    ? `${a.decision} by ${a.owner_id} via ${via[a.decided_via] || a.decided_via || "?"}, ${when(a.decided_at)}`
    : `closed ${when(a.decided_at)}${a.error_code ? ` (${a.error_code})` : ""}`;
  card.append(head, preview, said);
  li.append(card);
  $("#messages").append(li);
}

function describe(event) {
  const d = event.data || {};
  switch (event.type) {
    case "planner_decision": return d.tool ? `${d.decision}: ${d.tool}.${d.action}` : `${d.decision}`;
    case "tool_start": return `${d.tool}.${d.action}`;
    case "tool_end": return `${d.tool}.${d.action} → ${d.status}${d.code ? ` (${d.code})` : ""}`;
    case "tool_progress": return `${d.tool || ""} ${d.message || ""}`.trim();
    case "approval_required": return d.preview;
    case "approval_decided": return `${d.decision}${d.code ? ` (${d.code})` : ""}`;
    case "message_complete": return `outcome: ${d.outcome}`;
    case "error": return `${d.code}${d.reason ? `: ${d.reason}` : ""}`;
    default: return "";
  }
}

let timelineTurn = null;

function addTimeline(event) {
  if (event.turn_id !== timelineTurn) {  // a new turn (or the resume of one shown earlier)
    timelineTurn = event.turn_id;
    const head = document.createElement("li");
    head.className = "turn-start";
    head.textContent = event.type === "approval_decided" ? "Resumed turn" : "New turn";
    $("#timeline").append(head);
  }
  const li = document.createElement("li");
  li.className = `ev ev-${event.type}`;
  const seq = document.createElement("span");
  seq.className = "seq";
  seq.textContent = `#${event.seq}`;
  const type = document.createElement("span");
  type.className = "type";
  type.textContent = event.type;
  const what = document.createElement("span");
  what.className = "what";
  what.textContent = describe(event);
  li.append(seq, type, what);
  $("#timeline").append(li);
  li.scrollIntoView({ block: "nearest" });
}

// A view of one run: the assistant bubble it fills and the chips it raises.
// ``placeholder``: the "Thinking…" bubble shown while the model thinks (a turn's first event comes
// only with its first answer), which the run's reply then fills.
function runView(placeholder = null) {
  let bubble = placeholder;  // the .bubble element of this run's reply
  let streamed = "";
  const ensureBubble = () => {
    if (!bubble) bubble = $(".bubble", addMessage("assistant", "…"));
    bubble.classList.remove("thinking");
    return bubble;
  };
  return {
    event(event) {
      addTimeline(event);
      if (event.thread_id && event.thread_id !== state.threadId) selectThread(event.thread_id, false);
      if (event.type === "token_delta") {
        streamed += event.data.text || event.data.delta || "";
        ensureBubble().textContent = streamed;
      } else if (event.type === "tool_start") {
        streamed = "";  // text a model wrote before its calls was provisional; the reply follows them
        ensureBubble().textContent = `Running ${event.data.tool}.${event.data.action}…`;
      } else if (event.type === "message_complete") {
        setMarkdown(ensureBubble(), event.data.text);
        bubble.dataset.text = event.data.text;
        bubble.classList.add("done");
      } else if (event.type === "approval_required") {
        if (bubble && !bubble.classList.contains("done")) { bubble.parentElement.remove(); bubble = null; }
        const li = document.createElement("li");
        li.className = "msg assistant";
        li.append(renderRequest({ ...event.data, thread_id: event.thread_id }));
        $("#messages").append(li);
        li.scrollIntoView({ block: "end" });
      }
    },
    fail(message) {
      ensureBubble().textContent = `Something went wrong: ${message}`;
      bubble.classList.add("failed");
      addRetry();
    },
  };
}

// One action of a request: its preview, arguments and approve / edit / reject buttons (only the
// decisions its review config allows). ``choose(decision)`` sends or records the decision and
// resolves to the state to show, or rejects with the error.
function renderChip(action, choose) {
  const chip = $("#chip-template").content.firstElementChild.cloneNode(true);
  chip.dataset.approvalId = action.approval_id;
  $(".chip-action", chip).textContent = `${action.tool}.${action.action}`;
  if (action.expires_at) $(".chip-time", chip).textContent = `expires ${when(action.expires_at)}`;
  $(".chip-preview", chip).textContent = action.preview;
  $(".chip-args", chip).textContent = JSON.stringify(action.args, null, 2);
  const origins = Object.entries(action.provenance || {});
  const where = $(".chip-provenance", chip);
  where.hidden = origins.length === 0;
  for (const [field, said] of origins) {  // where each value came from, as the server says
    const li = document.createElement("li");
    li.textContent = `${field}: ${said}`;
    if (said.includes("someone else's content")) li.className = "foreign";
    where.append(li);
  }
  const allowed = new Set(action.allowed_decisions || ["approve", "edit", "reject"]);
  for (const kind of ["approve", "edit", "reject"]) $(`.${kind}`, chip).hidden = !allowed.has(kind);
  const editBox = $(".chip-edit", chip);
  const rejectBox = $(".chip-reject", chip);
  const buttons = chip.querySelectorAll("button");
  const decide = async (decision) => {
    buttons.forEach((b) => { b.disabled = true; });
    $(".chip-state", chip).textContent = "Sending…";
    try {
      $(".chip-state", chip).textContent = await choose(decision);
      chip.classList.add("decided");
    } catch (err) {
      $(".chip-state", chip).textContent = `Not sent: ${err.message}`;
      if (err.status !== 409) buttons.forEach((b) => { b.disabled = false; });
    }
  };
  $(".approve", chip).addEventListener("click", () => decide({ type: "approve" }));
  $(".edit", chip).addEventListener("click", () => {
    if (editBox.hidden) {
      $(".edit-args", chip).value = JSON.stringify(action.args, null, 2);
      editBox.hidden = false;
      $(".edit", chip).textContent = "Send edit";
      return;
    }
    let args;
    try { args = JSON.parse($(".edit-args", chip).value); } catch (_) {
      $(".chip-state", chip).textContent = "The arguments must be JSON.";
      return;
    }
    decide({ type: "edit", args });
  });
  $(".reject", chip).addEventListener("click", () => {
    if (rejectBox.hidden) {
      rejectBox.hidden = false;
      $(".reject", chip).textContent = "Confirm reject";
      return;
    }
    const reason = $(".reject-reason", chip).value.trim();
    decide(reason ? { type: "reject", message: reason } : { type: "reject" });
  });
  return chip;
}

// A pending approval request: one chip for one action; for several, a chip per action whose
// buttons record a decision, then one "Send decisions" that resumes the turn with all of them,
// in order (the server refuses a partial set, and the request stays pending).
function renderRequest(approval) {
  const path = `/v1/approvals/${encodeURIComponent(approval.approval_id)}/decision`;
  const actions = approval.actions && approval.actions.length ? approval.actions : [approval];
  const background = (approval.thread_id || "").startsWith("bg:");
  if (actions.length === 1) {
    const chip = renderChip({ ...approval, ...actions[0] }, async (decision) => {
      await runTurn(path, decision);
      if (background) { chip.append(runLinks(approval.thread_id)); showRunResult(chip, approval.thread_id); }
      return `Decided: ${decision.type}${background ? ". The run goes on in the background; its result lands in your inbox." : ""}`;
    });
    return chip;
  }
  const box = document.createElement("div");
  box.className = "request";
  box.dataset.approvalId = approval.approval_id;
  const head = document.createElement("p");
  head.className = "request-head";
  head.textContent = `${actions.length} actions need your approval: decide each, then send.`;
  box.append(head);
  const chosen = actions.map(() => null);
  const submit = document.createElement("button");
  submit.type = "button";
  submit.className = "send-decisions";
  submit.textContent = "Send decisions";
  submit.disabled = true;
  const note = document.createElement("p");
  note.className = "request-state";
  actions.forEach((action, i) => {
    box.append(renderChip(action, async (decision) => {
      chosen[i] = decision;
      submit.disabled = chosen.some((d) => d === null);
      return `Will ${decision.type}`;
    }));
  });
  submit.addEventListener("click", async () => {
    submit.disabled = true;
    note.textContent = "Sending…";
    try {
      await runTurn(path, { decisions: chosen });
      note.textContent = `Decided: ${chosen.map((d) => d.type).join(", ")}`;
      if (background) { box.append(runLinks(approval.thread_id)); showRunResult(box, approval.thread_id); }
    } catch (err) {
      note.textContent = `Not sent: ${err.message}`;
      if (err.status !== 409) submit.disabled = false;
    }
  });
  box.append(submit, note);
  return box;
}

// Links from a background run's approval to where its work shows: the run's thread and the inbox.
function runLinks(runThread) {
  const links = document.createElement("p");
  links.className = "run-links";
  for (const [label, kind, id] of [["Open the run", "run", runThread], ["Open the inbox", "inbox", null]]) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "small";
    b.textContent = label;
    b.addEventListener("click", async () => {
      setKind(kind);
      const threads = await refreshSide();
      selectThread(id || (threads[0] && threads[0].thread_id) || null);
    });
    links.append(b);
  }
  return links;
}

// Once the worker has finished a background run, its result in the card that approved it.
async function showRunResult(card, runThread) {
  const path = `/v1/background-runs/${encodeURIComponent(runThread.replace(/^bg:/, ""))}`;
  const final = new Set(["succeeded", "failed", "cancelled"]);
  for (let wait = 1000; wait < 600000; wait = Math.min(wait * 1.5, 15000)) {
    await new Promise((resolve) => setTimeout(resolve, wait));
    let run;
    try { run = await (await api(path)).json(); } catch (_) { return; }
    if (!final.has(run.status)) continue;
    const result = document.createElement("div");
    result.className = "run-result";
    const head = document.createElement("p");
    head.className = "chip-state";
    head.textContent = `The run ${run.status}${run.finished_at ? `, ${when(run.finished_at)}` : ""}:`;
    const body = document.createElement("div");
    body.className = "bubble";
    setMarkdown(body, run.reply || "(no reply)");
    result.append(head, body);
    card.append(result);
    return;
  }
}

function setBusy(busy) {
  state.busy = busy;
  $("#send").disabled = busy;
  $("#stop").hidden = !busy;
}

async function runTurn(path, body) {
  setBusy(true);
  setStatus("Working…", "warn");
  const controller = new AbortController();
  state.running = controller;
  const thinking = $(".bubble", addMessage("assistant", "Thinking…"));
  thinking.classList.add("thinking");
  try {
    const response = await api(path, { method: "POST", body, accept: "text/event-stream", signal: controller.signal });
    if (response.status === 202) {  // a background run's approval: a worker continues it, nothing streams here
      setStatus("The run continues in the background", "ok");
      return;
    }
    await consumeRun(response, runView(thinking));
    setStatus("Ready", "ok");
  } catch (err) {
    if (controller.signal.aborted || err.code === "cancelled") {
      setStatus("Stopped", "warn");
      addMessage("assistant", "Stopped. What had already run stays done.").classList.add("stopped");
      return;
    }
    setStatus(err.message, "bad");
    throw err;
  } finally {
    if (thinking.classList.contains("thinking") && thinking.parentElement) thinking.parentElement.remove();
    state.running = null;
    setBusy(false);
    refreshSide();
  }
}

async function stopTurn() {
  const threadId = state.threadId;
  if (threadId) {
    try { await api(`/v1/threads/${encodeURIComponent(threadId)}/stop`, { method: "POST" }); } catch (_) { /* shown below */ }
  }
  if (state.running) state.running.abort();
}

function retryButton(text, before = () => {}) {
  const retry = document.createElement("button");
  retry.type = "button";
  retry.className = "small retry";
  retry.textContent = "Retry";
  retry.addEventListener("click", () => { before(); $("#message").value = ""; send(text); });
  return retry;
}

// Why the last message was not sent, with a Retry (kept apart from the thread, which a token change reloads).
function showSendError(message, text = "") {
  const el = $("#send-error");
  el.textContent = message;
  if (message && text) el.append(" ", retryButton(text, () => showSendError("")));
  el.hidden = !message;
}

// A run that failed partway: Retry sends the same message again.
function addRetry() {
  const text = state.lastText;
  if (!text) return;
  const li = document.createElement("li");
  li.className = "msg assistant";
  li.append(retryButton(text, () => li.remove()));
  $("#messages").append(li);
}

async function send(text) {
  showSendError("");
  state.lastText = text;
  const sent = addMessage("user", text);
  if (!state.threadId) $("#thread-title").textContent = text.slice(0, 80);
  const body = state.threadId ? { thread_id: state.threadId, message: text } : { message: text };
  try {
    await runTurn("/v1/chat", body);
  } catch (err) {
    // Nothing was sent: keep the text to send again, and say why.
    sent.remove();
    if (!$("#message").value) $("#message").value = text;
    showSendError(`Not sent: ${err.message}`, text);
    if (err.status === 404) selectThread(null, false);  // the stored thread is gone or not ours
  }
}

function selectThread(threadId, load = true) {
  state.threadId = threadId;
  if (threadId) localStorage.setItem(THREAD_KEY, threadId); else localStorage.removeItem(THREAD_KEY);
  document.querySelectorAll("#thread-list li").forEach((li) => {
    const active = li.dataset.threadId === threadId;
    li.classList.toggle("active", active);
    const button = li.querySelector("button");
    if (button) button.setAttribute("aria-current", active ? "true" : "false");
  });
  $("#rename-thread").hidden = $("#delete-thread").hidden = !threadId;
  closeDrawers();
  if (load) loadThread();
}

async function loadThread() {
  $("#messages").replaceChildren();
  $("#timeline").replaceChildren();
  timelineTurn = null;
  $("#thread-title").textContent = "New chat";
  $("#rename-thread").hidden = $("#delete-thread").hidden = true;
  $("#composer").hidden = false;
  if (!state.threadId || !state.token) return;
  try {
    const thread = await (await api(`/v1/threads/${encodeURIComponent(state.threadId)}`)).json();
    $("#thread-title").textContent = thread.title || "Untitled";
    $("#rename-thread").hidden = $("#delete-thread").hidden = false;
    $("#composer").hidden = thread.kind !== "chat";  // run and inbox threads are the server's
    // Messages and decided approvals, in the order they happened.
    const items = [
      ...thread.messages.map((m) => ({ at: m.created_at, show: () => addMessage(m.role, m.content, m.created_at) })),
      ...(thread.approvals || []).map((a) => ({ at: a.decided_at || a.created_at, show: () => addDecided(a) })),
    ].sort((x, y) => (x.at < y.at ? -1 : x.at > y.at ? 1 : 0));
    for (const item of items) item.show();
    if (thread.pending_approval) {
      const li = document.createElement("li");
      li.className = "msg assistant";
      li.append(renderRequest(thread.pending_approval));
      $("#messages").append(li);
    }
  } catch (err) {
    if (err.status === 404) selectThread(null, false);
  }
}

async function renameThread() {
  const title = window.prompt("Rename this thread", $("#thread-title").textContent);
  if (title === null || !state.threadId) return;
  try {
    const thread = await (await api(`/v1/threads/${encodeURIComponent(state.threadId)}`, {
      method: "PATCH", body: { title },
    })).json();
    $("#thread-title").textContent = thread.title;
    refreshSide();
  } catch (err) { setStatus(`Not renamed: ${err.message}`, "bad"); }
}

async function deleteThread() {
  if (!state.threadId || !window.confirm("Delete this thread? Anything it waits on is cancelled.")) return;
  try {
    await api(`/v1/threads/${encodeURIComponent(state.threadId)}`, { method: "DELETE" });
    selectThread(null);
    refreshSide();
  } catch (err) { setStatus(`Not deleted: ${err.message}`, "bad"); }
}

function setKind(kind) {
  state.kind = kind;
  document.querySelectorAll(".kind").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.kind === kind)));
}

async function refreshSide() {
  if (!state.token) return [];
  try {
    const query = new URLSearchParams({ limit: "50", kind: state.kind });
    if (state.search) query.set("q", state.search);
    const [threads, approvals] = await Promise.all([
      api(`/v1/threads?${query}`).then((r) => r.json()),
      api("/v1/approvals").then((r) => r.json()),
    ]);
    const list = $("#thread-list");
    // A keyboard user in the list keeps their place when it is drawn again (after every turn).
    const focused = document.activeElement && document.activeElement.closest("#thread-list li");
    const keep = focused ? focused.dataset.threadId : null;
    list.replaceChildren();
    for (const t of threads.threads) {
      const li = document.createElement("li");
      li.dataset.threadId = t.thread_id;
      li.className = t.thread_id === state.threadId ? "active" : "";
      const open = document.createElement("button");  // a button: reachable and usable by keyboard
      open.type = "button";
      open.className = "thread";
      open.setAttribute("aria-current", t.thread_id === state.threadId ? "true" : "false");
      const title = document.createElement("span");
      title.textContent = t.title || (t.kind === "chat" ? "Untitled" : t.thread_id);
      const status = document.createElement("small");
      status.textContent = `${t.status.replace("_", " ")} · ${when(t.updated_at)}`;
      open.append(title, status);
      open.addEventListener("click", () => selectThread(t.thread_id));
      li.append(open);
      list.append(li);
      if (t.thread_id === keep) open.focus();
    }
    if (!threads.threads.length) {
      const li = document.createElement("li");
      li.className = "empty";
      li.textContent = state.search ? "No thread matches." : "No threads yet.";
      list.append(li);
    }
    const side = $("#approvals");
    side.replaceChildren();
    for (const a of approvals.approvals) {
      const li = document.createElement("li");
      const preview = document.createElement("span");
      preview.textContent = a.preview;
      const open = document.createElement("button");
      open.type = "button";
      open.className = "small";
      open.textContent = "Open";
      open.setAttribute("aria-label", `Open: ${a.preview}`);
      open.addEventListener("click", () => {
        setKind(a.thread_id.startsWith("bg:") ? "run" : "chat");
        selectThread(a.thread_id);
        refreshSide();
      });
      li.append(preview, open);
      side.append(li);
    }
    if (!approvals.approvals.length) {
      const li = document.createElement("li");
      li.className = "empty";
      li.textContent = "None";
      side.append(li);
    }
    return threads.threads;
  } catch (_) { return []; /* the status line already says why */ }
}

// ---- drawers (phone width) --------------------------------------------------------------------

function closeDrawers() {
  for (const id of ["threads", "side"]) $(`#${id}`).classList.remove("open");
  for (const id of ["open-threads", "open-side"]) $(`#${id}`).setAttribute("aria-expanded", "false");
}

function toggleDrawer(id, button) {
  const open = !$(`#${id}`).classList.contains("open");
  closeDrawers();
  $(`#${id}`).classList.toggle("open", open);
  button.setAttribute("aria-expanded", String(open));
  if (open) ($(`#${id} button, #${id} input`) || button).focus();
}

// ---- start-up -----------------------------------------------------------------------------

function init() {
  // The demo link carries the token in the fragment (``/#token=...``): browsers never send a
  // fragment to the server, so no access log or proxy sees it. Keep it, then drop it from the
  // address bar and history.
  const fragment = new URLSearchParams(window.location.hash.slice(1));
  const fromLink = fragment.get("token");
  if (fromLink) {
    state.token = fromLink;
    localStorage.setItem(TOKEN_KEY, fromLink);
    history.replaceState(null, "", window.location.pathname + window.location.search);
  }
  $("#token").value = state.token;
  $("#token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("#token").value.trim();
    localStorage.setItem(TOKEN_KEY, state.token);
    setStatus(state.token ? "Token saved" : "No token", state.token ? "ok" : "bad");
    loadThread();
    refreshSide();
  });
  $("#new-thread").addEventListener("click", () => { setKind("chat"); selectThread(null); refreshSide(); });
  $("#composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("#message").value.trim();
    if (!text || state.busy) return;
    $("#message").value = "";
    send(text);
  });
  $("#stop").addEventListener("click", stopTurn);
  $("#rename-thread").addEventListener("click", renameThread);
  $("#delete-thread").addEventListener("click", deleteThread);
  let searching = null;
  $("#thread-search").addEventListener("input", (e) => {
    clearTimeout(searching);
    searching = setTimeout(() => { state.search = e.target.value.trim(); refreshSide(); }, 200);
  });
  document.querySelectorAll(".kind").forEach((b) => b.addEventListener("click", () => { setKind(b.dataset.kind); refreshSide(); }));
  $("#open-threads").addEventListener("click", (e) => toggleDrawer("threads", e.currentTarget));
  $("#open-side").addEventListener("click", (e) => toggleDrawer("side", e.currentTarget));
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      if (state.busy && document.activeElement === $("#message")) stopTurn();
      // Escape that closes a drawer only closes it: a search box would clear itself too.
      if (document.querySelector(".drawer.open")) e.preventDefault();
      closeDrawers();
    }
  });
  $("#message").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("#composer").requestSubmit();
    }
  });
  setStatus(state.token ? "Ready" : "Paste your API token to start.", state.token ? "ok" : "bad");
  loadThread();
  refreshSide();
}

document.addEventListener("DOMContentLoaded", init);
