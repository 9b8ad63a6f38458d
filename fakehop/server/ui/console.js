// The fakehop console: a live request log fed by GET events (read with fetch, since
// EventSource cannot send the admin token), and buttons that drive the control API.
"use strict";

const API = new URL(".", location.href); // the control API: this page is API + "ui"
const TOKEN_KEY = "fakehop-admin-token";
const PAGE = new URLSearchParams(location.search);
const LOG_ROWS = Math.min(5000, Math.max(10, Number(PAGE.get("rows")) || 500)); // rows the log keeps
const STATE_EVERY = 1000; // ms: queue and settings are read again at most this often while requests come
const SESSIONS_EVERY = 5000;
const CHECK_AFTER = 250; // ms after the last key typed, the editor's text is checked

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  session: "",
  columns: [],
  calls: [],
  rows: new Map(), // seq -> {data, tr}
  newestSeq: 0,
  skipped: 0,
  scenarios: [],
  defaultName: "",
  selected: null, // seq of the request shown in the detail
  stateTimer: null,
  watching: null, // the AbortController of the push being read
  readingSessions: false,
  admitted: false, // the server takes this tab's calls: it needs no token, or has the tab's
};

const $ = (id) => document.getElementById(id);

class Unauthorized extends Error {}

// ------------------------------------------------------------------ the control API

function headers(extra) {
  const all = Object.assign({}, extra);
  if (state.token) all.Authorization = "Bearer " + state.token;
  return all;
}

function apiUrl(path, params) {
  const url = new URL(path, API);
  for (const [name, value] of Object.entries(params || {})) url.searchParams.set(name, value);
  if (state.session && path !== "events" && path !== "sessions") url.searchParams.set("session", state.session);
  return url;
}

async function call(method, path, { json, yaml, params } = {}) {
  const init = { method, cache: "no-store", headers: headers() };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  } else if (yaml !== undefined) {
    init.body = yaml;
    init.headers["Content-Type"] = "application/yaml";
  }
  const response = await fetch(apiUrl(path, params), init);
  if (response.status === 401) {
    refused();
    throw new Unauthorized("the admin token is needed");
  }
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const problems = answer.problems ? ": " + answer.problems.join("; ") : "";
    throw new Error((answer.error || response.status + " " + response.statusText) + problems);
  }
  return answer;
}

function refusal() {
  return state.token ? "the server refused that token" : "";
}

// A call refused for want of the token: the server restarted with another while the page was open.
function refused() {
  stop();
  askForToken(refusal());
}

function say(text, isError) {
  const message = $("message");
  message.textContent = text;
  message.classList.toggle("error", Boolean(isError));
}

function failed(error) {
  if (!(error instanceof Unauthorized)) say(error.message, true);
}

// ------------------------------------------------------------------ the push

async function watch() {
  if (state.watching) state.watching.abort();
  const controller = (state.watching = new AbortController());
  while (!controller.signal.aborted) {
    try {
      const response = await fetch(apiUrl("events"), { headers: headers(), cache: "no-store", signal: controller.signal });
      if (response.status === 401) {
        refused();
        return;
      }
      if (!response.ok) throw new Error("events: " + response.status);
      setConnection("live");
      await readEvents(response.body);
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    setConnection("reconnecting");
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

async function readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      handleFrame(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
    }
  }
}

function handleFrame(frame) {
  let name = "message";
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  if (!data.length) return; // a ping
  const payload = JSON.parse(data.join("\n"));
  if (name === "hello") greet(payload);
  else if (name === "rows") applyRows(payload);
}

function greet(hello) {
  state.columns = hello.columns;
  state.calls = hello.calls;
  if (hasCall("GET /sessions") && !state.readingSessions) {
    state.readingSessions = true;
    readSessions();
  }
}

function hasCall(name) {
  return state.calls.includes(name);
}

function setConnection(text) {
  const connection = $("connection");
  connection.textContent = text;
  connection.dataset.state = text === "live" ? "live" : "down";
}

// ------------------------------------------------------------------ the log

function applyRows(push) {
  const tbody = $("log").tBodies[0];
  if (push.reset) {
    tbody.replaceChildren();
    state.rows.clear();
  }
  state.skipped += push.skipped;
  const added = document.createDocumentFragment();
  for (const values of push.rows) {
    const data = Object.fromEntries(state.columns.map((column, index) => [column, values[index]]));
    const known = state.rows.get(data.seq);
    if (known) {
      known.data = data;
      fillRow(known.tr, data);
      if (state.selected === data.seq && data.end !== "in_progress") showDetail(data.seq);
    } else {
      const tr = document.createElement("tr");
      tr.dataset.seq = data.seq;
      fillRow(tr, data);
      added.prepend(tr);
      state.rows.set(data.seq, { data, tr });
      state.newestSeq = Math.max(state.newestSeq, data.seq);
    }
  }
  tbody.prepend(added);
  while (state.rows.size > LOG_ROWS) {
    const oldest = tbody.lastElementChild;
    state.rows.delete(Number(oldest.dataset.seq));
    oldest.remove();
  }
  showCount();
  if (push.rows.length) soonReadState();
}

function fillRow(tr, data) {
  const cells = [
    data.seq,
    clock(data.started_ms),
    data.protocol || "-",
    data.unrouted || data.model || "-",
    data.scenario || "-",
    data.status == null ? "-" : data.status,
    data.end,
    data.events,
    data.duration_us == null ? "…" : (data.duration_us / 1e6).toFixed(3) + " s",
    data.session || "global",
  ];
  if (tr.cells.length !== cells.length) tr.replaceChildren(...cells.map(() => document.createElement("td")));
  cells.forEach((text, index) => {
    const cell = tr.cells[index];
    if (cell.textContent !== String(text)) cell.textContent = text;
  });
  tr.className = "end-" + data.end;
  tr.title = [data.unrouted, data.error, data.retry_after != null ? "Retry-After: " + data.retry_after : ""]
    .filter(Boolean)
    .join("\n");
  tr.hidden = Boolean(state.session) && data.session !== state.session;
  tr.classList.toggle("selected", state.selected === data.seq);
}

function clock(milliseconds) {
  const at = new Date(milliseconds);
  const two = (number) => String(number).padStart(2, "0");
  return `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}.${String(at.getMilliseconds()).padStart(3, "0")}`;
}

function showCount() {
  const shown = state.rows.size;
  let text = shown ? `the last ${shown} of ${state.newestSeq} requests` : "no requests yet";
  if (shown >= LOG_ROWS) text += ` (the log keeps ${LOG_ROWS})`;
  if (state.skipped) text += `; ${state.skipped} updates skipped at this rate`;
  $("log-count").textContent = text;
}

function filterRows() {
  for (const { data, tr } of state.rows.values()) tr.hidden = Boolean(state.session) && data.session !== state.session;
}

// ------------------------------------------------------------------ one request in detail

async function showDetail(seq) {
  state.selected = seq;
  for (const { data, tr } of state.rows.values()) tr.classList.toggle("selected", data.seq === seq);
  try {
    const { request } = await call("GET", "requests/" + seq);
    if (state.selected !== seq) return;
    $("detail").hidden = false;
    $("detail-title").textContent = `Request #${seq}`;
    $("detail-summary").textContent = summaryOf(request);
    $("detail-body").textContent = typeof request.body === "string" ? request.body : JSON.stringify(request.body, null, 2);
    showFrames(request);
    await showScenario(request.scenario);
  } catch (error) {
    failed(error);
  }
}

function summaryOf(request) {
  const parts = [`${request.method} ${request.path}`, `scenario ${request.scenario || "-"}`, `status ${request.status ?? "-"}`, request.end];
  if (request.retry_after != null) parts.push(`Retry-After ${request.retry_after}`);
  if (request.error) parts.push(request.error);
  return parts.join(" · ");
}

function showFrames(request) {
  const frames = request.frames.flatMap(([offset, text]) => framesOf(text).map((frame) => ({ offset, ...frame })));
  const rows = frames.map(({ offset, text, kind }) => frameRow(formatOffset(offset), text, kind));
  if (request.frames_cut) rows.push(frameRow("", `cut here: the journal keeps a stream's first ${request.frame_bytes} bytes, and ${request.sent_bytes} were sent`, "cut"));
  $("detail-frames").tBodies[0].replaceChildren(...rows);
  const writes = request.frames.length;
  const note = writes ? `${plural(frames.length, "frame")} in ${plural(writes, "write")}, ${request.frame_bytes} bytes` : "none";
  $("detail-frames-note").textContent = `(${note}${request.frames_cut ? "; cut" : ""})`;
}

// A write's text as the SSE frames it holds, in order: each event (its lines up to the blank
// line that ends it), each comment line (a keepalive) on its own, and what follows the last
// blank line (the end of a write the journal cut), marked as unended.
function framesOf(text) {
  const blocks = text.split("\n\n");
  const unended = blocks.pop();
  const frames = [];
  for (const block of blocks) {
    const fields = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) frames.push({ text: line, kind: "comment" });
      else fields.push(line);
    }
    if (fields.length) frames.push({ text: fields.join("\n"), kind: "event" });
  }
  if (unended) frames.push({ text: unended, kind: "unended" });
  return frames;
}

function frameRow(offset, text, kind) {
  const tr = document.createElement("tr");
  tr.className = "frame-" + kind;
  const at = document.createElement("td");
  at.textContent = offset;
  const bytes = document.createElement("td");
  bytes.textContent = text;
  tr.append(at, bytes);
  return tr;
}

function formatOffset(seconds) {
  return (seconds * 1000).toFixed(1) + " ms";
}

function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

async function showScenario(label) {
  const name = label ? label.split("->")[0].split("[")[0] : null;
  $("detail-scenario-title").textContent = label ? `Scenario ${label}` : "Scenario";
  if (!name) {
    $("detail-scenario").textContent = "none: the request was refused before a scenario was chosen";
    return;
  }
  try {
    const { scenario } = await call("GET", "scenarios/" + encodeURIComponent(name));
    $("detail-scenario").textContent = scenario.text ?? JSON.stringify(scenario.definition, null, 2);
  } catch (error) {
    $("detail-scenario").textContent = error.message;
  }
}

// ------------------------------------------------------------------ queue, default, scenarios, settings

async function readState() {
  state.stateTimer = null;
  try {
    const [health, { queue }, { faults }] = await Promise.all([
      call("GET", "health"), call("GET", "queue"), call("GET", "faults"),
    ]);
    state.defaultName = health.default;
    $("default").textContent = health.default;
    if (document.activeElement !== $("time-scale")) $("time-scale").value = health.time_scale;
    showQueue(queue);
    showFaults(faults);
    markDefault();
  } catch (error) {
    failed(error);
  }
}

function soonReadState() {
  if (state.stateTimer === null) state.stateTimer = setTimeout(readState, STATE_EVERY);
}

function showQueue(queue) {
  if (!queue.length) {
    $("queue").textContent = "empty";
    return;
  }
  const runs = [];
  for (const name of queue) {
    const last = runs[runs.length - 1];
    if (last && last.name === name) last.count += 1;
    else runs.push({ name, count: 1 });
  }
  $("queue").textContent = runs.slice(0, 8).map(({ name, count }) => (count > 1 ? `${name} ×${count}` : name)).join(", ") +
    (runs.length > 8 ? ", …" : "") + ` (${queue.length})`;
}

// The session's faults, oldest first: each kind with the requests it will still break.
function showFaults(faults) {
  const shown = faults.slice(0, 8).map(({ kind, left }) => (left === null ? `${kind} ×∞` : left > 1 ? `${kind} ×${left}` : kind));
  $("fault-list").textContent = faults.length ? shown.join(", ") + (faults.length > 8 ? ", …" : "") : "none";
}

async function readScenarios() {
  try {
    const answer = await call("GET", "scenarios");
    state.scenarios = answer.scenarios;
    state.defaultName = answer.default;
    showScenarios();
  } catch (error) {
    failed(error);
  }
}

function showScenarios() {
  const filter = $("scenario-filter").value.trim().toLowerCase();
  const items = state.scenarios
    .filter((scenario) => !filter || (scenario.name + " " + scenario.description).toLowerCase().includes(filter))
    .map((scenario) => {
      const li = document.createElement("li");
      li.dataset.name = scenario.name;
      const name = document.createElement("strong");
      name.textContent = scenario.name;
      const kind = document.createElement("span");
      kind.className = "muted";
      kind.textContent = ` ${scenario.kind}${scenario.origin === "bundled" ? "" : " · " + scenario.origin}`;
      const description = document.createElement("p");
      description.textContent = scenario.description;
      const queue = document.createElement("button");
      queue.type = "button";
      queue.textContent = "queue next";
      queue.addEventListener("click", () => queueScenario(scenario.name));
      const makeDefault = document.createElement("button");
      makeDefault.type = "button";
      makeDefault.textContent = "make default";
      makeDefault.className = "make-default";
      makeDefault.addEventListener("click", () => setDefault(scenario.name));
      li.append(name, kind, queue, makeDefault, description);
      return li;
    });
  $("scenarios").replaceChildren(...items);
  markDefault();
}

function markDefault() {
  for (const li of $("scenarios").children) li.classList.toggle("default", li.dataset.name === state.defaultName);
}

function times() {
  const value = Number($("times").value);
  return Number.isInteger(value) && value >= 1 ? value : 1;
}

async function queueScenario(name) {
  try {
    const answer = await call("POST", "queue", { json: { scenario: name, times: times() } });
    // what was done, not what the queue holds now: the queue panel shows that, kept up to date
    say(`queued ${answer.queued} for the next ${answer.times > 1 ? `${answer.times} requests` : "request"}`);
    await readState();
  } catch (error) {
    failed(error);
  }
}

// A fault over the next N answers, whatever scenario they come from: the app keeps its usual
// answer, broken the way the button says.
async function addFault(fault) {
  try {
    const answer = await call("POST", "faults", { json: Object.assign({}, fault, { times: times() }) });
    say(`fault ${answer.kind} for the next ${answer.times > 1 ? `${answer.times} requests` : "request"}`);
    await readState();
  } catch (error) {
    failed(error);
  }
}

async function setDefault(name) {
  try {
    const answer = await call("PUT", "default", { json: { scenario: name } });
    say(`default: ${answer.default}`);
    await readState();
  } catch (error) {
    failed(error);
  }
}

async function readSessions() {
  if (!state.admitted) {
    state.readingSessions = false; // until the next greeting
    return;
  }
  try {
    const { sessions } = await call("GET", "sessions");
    const select = $("session");
    const names = sessions.map((session) => session.session);
    if (state.session && !names.includes(state.session)) names.push(state.session);
    const options = [new Option("all (global)", ""), ...names.map((name) => new Option(name, name))];
    select.replaceChildren(...options);
    select.value = state.session;
  } catch (error) {
    failed(error);
  }
  setTimeout(readSessions, SESSIONS_EVERY);
}

// ------------------------------------------------------------------ the editor

let checkTimer = null;
let checked = 0; // the number of the check whose answer is shown: a slower, older answer is dropped

function editorChanged() {
  showLineNumbers([]);
  clearTimeout(checkTimer);
  checkTimer = setTimeout(checkEditor, CHECK_AFTER);
}

async function checkEditor() {
  const number = ++checked;
  $("editor-state").textContent = "checking…";
  try {
    const answer = await call("POST", "scenarios", { yaml: $("editor").value, params: { check: "true" } });
    if (number !== checked) return;
    showProblems(answer.valid ? [] : answer.problems);
    $("editor-state").textContent = answer.valid ? `✓ ${answer.scenario.name} (${answer.scenario.kind})` : `${answer.problems.length} problem${answer.problems.length > 1 ? "s" : ""}`;
    $("editor-state").classList.toggle("error", !answer.valid);
    return answer;
  } catch (error) {
    if (number === checked) $("editor-state").textContent = error.message;
  }
}

function showProblems(problems) {
  const items = problems.map((problem) => {
    const li = document.createElement("li");
    li.textContent = problem.line ? `line ${problem.line}: ${problem.message}` : problem.message;
    li.dataset.line = problem.line;
    li.addEventListener("click", () => selectLine(problem.line));
    return li;
  });
  $("problems").replaceChildren(...items);
  showLineNumbers(problems.map((problem) => problem.line));
}

function showLineNumbers(badLines) {
  const count = $("editor").value.split("\n").length;
  const lines = [];
  for (let line = 1; line <= count; line++) {
    const span = document.createElement("span");
    span.textContent = line + "\n";
    if (badLines.includes(line)) span.className = "bad";
    lines.push(span);
  }
  $("editor-lines").replaceChildren(...lines);
  $("editor-lines").scrollTop = $("editor").scrollTop;
}

function selectLine(line) {
  const editor = $("editor");
  const lines = editor.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((sum, text) => sum + text.length + 1, 0);
  editor.focus();
  editor.setSelectionRange(start, start + (lines[line - 1] || "").length);
}

async function addEdited() {
  try {
    const answer = await call("POST", "scenarios", { yaml: $("editor").value });
    say(`${answer.replaced ? "replaced" : "added"} ${answer.scenario.name}`);
    await readScenarios();
    return answer.scenario.name;
  } catch (error) {
    failed(error);
    await checkEditor();
    return null;
  }
}

async function queueEdited() {
  const name = await addEdited();
  if (name) await queueScenario(name);
}

// ------------------------------------------------------------------ the admin token

function askForToken(problem) {
  $("token-dialog").hidden = false;
  $("token-error").hidden = !problem;
  $("token-error").textContent = problem;
  $("token").focus();
}

// Whether this server needs the admin token, and whether the tab's is it, asked of the one
// call that needs none before any other: so the page asks for a token it needs, and sends no
// call the server would refuse.
async function connect() {
  let access;
  try {
    const response = await fetch(new URL("ui/token", API), { cache: "no-store", headers: headers() });
    if (!response.ok) throw new Error(`ui/token: ${response.status} ${response.statusText}`);
    access = await response.json();
  } catch (error) {
    setConnection("unreachable");
    say(error.message, true);
    setTimeout(connect, 1000);
    return;
  }
  if (!access.accepted) {
    askForToken(refusal());
    return;
  }
  $("token-dialog").hidden = true;
  $("forget-token").hidden = !access.admin_token;
  start();
}

function useToken(event) {
  event.preventDefault();
  state.token = $("token").value;
  sessionStorage.setItem(TOKEN_KEY, state.token);
  connect();
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  $("forget-token").hidden = true;
  stop();
  askForToken("");
}

// ------------------------------------------------------------------ wiring

function start() {
  state.admitted = true;
  watch();
  readScenarios();
  readState();
  checkEditor();
}

// No more calls until the token is given again.
function stop() {
  state.admitted = false;
  if (state.watching) state.watching.abort();
  clearTimeout(state.stateTimer);
  state.stateTimer = null;
  setConnection("token needed");
}

function wire() {
  $("faults").addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (button) addFault(JSON.parse(button.dataset.fault));
  });
  $("clear-faults").addEventListener("click", async () => {
    try {
      const answer = await call("DELETE", "faults");
      say(`removed ${answer.removed} ${answer.removed === 1 ? "fault" : "faults"}`);
      await readState();
    } catch (error) {
      failed(error);
    }
  });
  $("clear-queue").addEventListener("click", async () => {
    try {
      const answer = await call("DELETE", "queue");
      say(`removed ${answer.removed} from the queue`);
      await readState();
    } catch (error) {
      failed(error);
    }
  });
  $("reset").addEventListener("click", async () => {
    try {
      await call("POST", "reset");
      say(state.session ? `session ${state.session} dropped` : "reset: queue, faults, journal, sequences, added scenarios, default and time scale as the server started");
      await Promise.all([readState(), readScenarios()]);
    } catch (error) {
      failed(error);
    }
  });
  $("time-scale-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const answer = await call("PUT", "time_scale", { json: { time_scale: Number($("time-scale").value) } });
      say(`time scale: ${answer.time_scale}`);
    } catch (error) {
      failed(error);
    }
  });
  $("session").addEventListener("change", () => {
    state.session = $("session").value;
    filterRows();
    readState();
    readScenarios();
  });
  $("log").tBodies[0].addEventListener("click", (event) => {
    const tr = event.target.closest("tr");
    if (tr) showDetail(Number(tr.dataset.seq));
  });
  $("detail-close").addEventListener("click", () => {
    state.selected = null;
    $("detail").hidden = true;
    for (const { tr } of state.rows.values()) tr.classList.remove("selected");
  });
  $("scenario-filter").addEventListener("input", showScenarios);
  $("editor").addEventListener("input", editorChanged);
  $("editor").addEventListener("scroll", () => ($("editor-lines").scrollTop = $("editor").scrollTop));
  $("editor-add").addEventListener("click", addEdited);
  $("editor-queue").addEventListener("click", queueEdited);
  $("token-form").addEventListener("submit", useToken);
  $("forget-token").addEventListener("click", forgetToken);
  showLineNumbers([]);
}

wire();
connect();
