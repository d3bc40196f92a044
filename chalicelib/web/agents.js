// Agents (#/agents, #/agents/<id>, #/agents/<id>/runs/<run>): the environment's agents, one agent's
// settings (admins edit them, attach input files and run it now), its runs, and each run's steps,
// files and mail. A browser agent's run that waits for the portal's verification code takes it here
// (POST /agents/<id>/verification). Every control is for admins (the API refuses anyone else).
import { useRef, useState } from "preact/hooks";
import { api, can, html, query } from "./api.js";
import { Confirm, duration, Pager, plural, Problem, Status, useApi, usePaging, usePoll, When } from "./ui.js";

export function AgentsPage({ route }) {
  const [id, sub, runId] = route.path;
  let shown = html`<${AgentList} />`;
  if (id && sub === "runs" && runId) shown = html`<${RunPage} agentId=${id} runId=${runId} key=${`${id}/${runId}`} />`;
  else if (id) shown = html`<${AgentPage} id=${id} key=${id} />`;
  return html`<div class="agents-page">${shown}</div>`;
}

const ACTIVE = new Set(["queued", "running", "waiting_for_verification"]);
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const CADENCES = ["manual", "hourly", "daily", "weekdays", "weekly"];
const NEEDS_HOUR = new Set(["daily", "weekdays", "weekly"]);
const POLL_MS = 2000;
// The API takes a request body of at most 5 MiB (settings.max_body_bytes); base64 makes a file a third
// larger, so a file sent inline is at most 3.5 MiB.
const MAX_FILE_BYTES = 3.5 * 1024 * 1024;
// A file's link only when it is a web address (a presigned URL), never javascript: or data:.
const webUrl = (url) => (/^https?:\/\//i.test(url || "") ? url : null);
const pad = (n) => String(n ?? 0).padStart(2, "0");
const agentPath = (id) => `agents/${encodeURIComponent(id)}`;

export function schedule(agent) {
  const at = `${pad(agent.hour)}:${pad(agent.minute)}`;
  const zone = ` (${agent.timezone})`;
  switch (agent.cadence) {
    case "hourly": return `Hourly at :${pad(agent.minute)}${zone}`;
    case "daily": return `Daily at ${at}${zone}`;
    case "weekdays": return `Weekdays at ${at}${zone}`;
    case "weekly": return `${DAYS[agent.day_of_week] || "Weekly"}s at ${at}${zone}`;
    default: return "Manual: runs when started";
  }
}

const STATUS_TEXT = { waiting_for_verification: "waiting for a verification code" };
function RunStatus({ status }) {
  return html`<span class=${`run-status run-${status}`}>${STATUS_TEXT[status] || status}</span>`;
}

function bytes(n) {
  if (n === null || n === undefined) return "uploading";
  if (n < 1024) return `${n} B`;
  return n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1024 / 1024).toFixed(1)} MB`;
}

function AgentList() {
  const paging = usePaging();
  const { loading, error, data } = useApi(`agents${query({ limit: 50, cursor: paging.cursor })}`);
  if (error) return html`<${Problem} error=${error} what="load the agents" />`;
  if (loading && !data) return html`<p>Loading agents…</p>`;
  if (!data.data.length && paging.page === 1) return html`<p>No agents yet.</p>`;
  return html`
    <table class="agents">
      <caption class="visually-hidden">Agents</caption>
      <thead><tr><th scope="col">Agent</th><th scope="col">Kind</th><th scope="col">Schedule</th>
        <th scope="col">Last run</th><th scope="col">Next run</th><th scope="col">Needs</th></tr></thead>
      <tbody>
        ${data.data.map((a) => html`<tr>
          <td><a href=${`#/agents/${a.id}`}>${a.name}</a>${a.active ? "" : html` <span class="muted">(inactive)</span>`}</td>
          <td>${a.kind}</td>
          <td>${schedule(a)}</td>
          <td><${When} iso=${a.last_run_at} /></td>
          <td><${When} iso=${a.next_run_at} /></td>
          <td>${a.browser?.needs_verification
            ? html`<a class="needs-code" href=${`#/agents/${a.id}`}>a verification code</a>` : "—"}</td>
        </tr>`)}
      </tbody>
    </table>
    <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Agents" />`;
}

function AgentPage({ id }) {
  const agent = useApi(agentPath(id));
  const paging = usePaging();
  const runs = useApi(`${agentPath(id)}/runs${query({ limit: 20, cursor: paging.cursor })}`);
  const [status, setStatus] = useState("");
  const [error, setError] = useState(null);
  const [starting, setStarting] = useState(false);
  const startingRef = useRef(false); // read at the press itself: a double click's second press sees it
  const busy = (runs.data?.data || []).some((r) => ACTIVE.has(r.status)) || agent.data?.browser?.needs_verification;
  // While a run goes on (or waits for a code): the agent and its runs read again POLL_MS after each answer.
  usePoll((signal) => Promise.all([agent.refresh(signal), runs.refresh(signal)]), POLL_MS, Boolean(busy));

  if (agent.error) return html`<p><a href="#/agents">All agents</a></p><${Problem} error=${agent.error} what="load the agent" />`;
  if (!agent.data) return html`<p>Loading the agent…</p>`;
  const a = agent.data;

  async function runNow() {
    if (startingRef.current) return; // one run a press: a second press while the first is asked for does nothing
    startingRef.current = true;
    setStarting(true);
    setError(null);
    try {
      const run = await api(`${agentPath(id)}/runs`, { method: "POST" });
      setStatus(`Run ${run.id} started: ${run.status}.`);
      paging.reset();
      runs.reload();
      agent.reload();
    } catch (failed) { setError(failed); setStatus(""); } finally { startingRef.current = false; setStarting(false); }
  }

  return html`
    <p><a href="#/agents">All agents</a></p>
    <h2>${a.name}</h2>
    <p class="muted">${a.kind === "browser" ? "Browser agent" : "Agent"} · ${schedule(a)}${a.active ? "" : " · inactive"}${" "}· next run <${When} iso=${a.next_run_at} /> · last run <${When} iso=${a.last_run_at} /></p>
    ${a.browser?.needs_verification && html`<${Verification} agent=${a} onGiven=${(text) => { setStatus(text); agent.reload(); runs.reload(); }} />`}
    ${can("admin") && html`<div class="toolbar">
      <button type="button" onClick=${runNow} aria-disabled=${starting ? "true" : undefined}>Run now</button>
    </div>`}
    <${Problem} error=${error} what="start a run" />
    <${Status} text=${status} />
    <section aria-labelledby="runs-title">
      <h3 id="runs-title">Runs</h3>
      <${Runs} agentId=${id} runs=${runs} paging=${paging} />
    </section>
    <section aria-labelledby="settings-title">
      <h3 id="settings-title">Settings</h3>
      ${can("admin") ? html`<${EditAgent} agent=${a} onSaved=${agent.reload} />` : html`<${AgentFields} agent=${a} />`}
    </section>
    ${a.browser && html`<section aria-labelledby="portal-title">
      <h3 id="portal-title">Portal</h3>
      <dl class="fields">
        <dt>Automation</dt><dd>${a.browser.automation}</dd>
        <dt>Portal</dt><dd>${a.browser.portal_url}</dd>
        <dt>Login stored</dt><dd>${a.browser.has_credentials ? "yes" : "no: the operator sets it (agents set-credentials)"}</dd>
        <dt>Browser session saved</dt><dd>${a.browser.has_browser_context ? "yes" : "no"}</dd>
        <dt>Imports into</dt><dd>${a.browser.settings?.data_stream_key || "—"}</dd>
      </dl>
    </section>`}
    <section aria-labelledby="files-title">
      <h3 id="files-title">Input files</h3>
      <${InputFiles} agent=${a} onChanged=${agent.reload} />
    </section>`;
}

// The code the portal sent, for the run that waits for it (admins); others are told who can. The
// panel goes once the run has it, so what happened is told by the page's own status line.
function Verification({ agent, runId, onGiven }) {
  const [code, setCode] = useState("");
  const [error, setError] = useState(null);
  async function submit(event) {
    event.preventDefault();
    setError(null);
    try {
      const run = await api(`${agentPath(agent.id)}/verification`, { method: "POST", body: { code: code.trim() } });
      setCode("");
      onGiven(`Code given: run ${run.id} is ${run.status} again.`);
    } catch (failed) { setError(failed); }
  }
  return html`
    <section class="verification" aria-labelledby="verification-title">
      <h3 id="verification-title">Verification code needed</h3>
      <p>The portal sent a verification code${agent.browser.verification_required_at ? html` (asked <${When} iso=${agent.browser.verification_required_at} />)` : ""}:
        ${runId ? " this run" : " a run"} waits for it, up to 30 minutes.</p>
      ${can("admin") ? html`<form class="toolbar" onSubmit=${submit}>
          <div><label for="verification-code">Verification code</label>
            <input id="verification-code" value=${code} autocomplete="one-time-code" inputmode="numeric"
                   onInput=${(e) => setCode(e.currentTarget.value)} required /></div>
          <button type="submit">Send code</button>
        </form>` : html`<p>An admin enters it here.</p>`}
      <${Problem} error=${error} what="give the code" />
    </section>`;
}

function Runs({ agentId, runs, paging }) {
  if (runs.error) return html`<${Problem} error=${runs.error} what="load the runs" />`;
  if (!runs.data) return html`<p>Loading runs…</p>`;
  if (!runs.data.data.length && paging.page === 1) return html`<p>No runs yet.</p>`;
  return html`
    <table class="runs">
      <caption class="visually-hidden">Runs, newest first</caption>
      <thead><tr><th scope="col">Run</th><th scope="col">Status</th><th scope="col">Trigger</th><th scope="col">Started</th>
        <th scope="col" class="number">Took</th><th scope="col" class="number">Steps</th><th scope="col" class="number">Files</th>
        <th scope="col">Mail</th></tr></thead>
      <tbody>
        ${runs.data.data.map((r) => html`<tr key=${r.id}>
          <td><a href=${`#/agents/${agentId}/runs/${r.id}`}>Run ${r.id}</a></td>
          <td><${RunStatus} status=${r.status} /></td>
          <td>${r.trigger}</td>
          <td><${When} iso=${r.started_at || r.created_at} /></td>
          <td class="number">${duration(r)}</td>
          <td class="number">${r.steps.length}</td>
          <td class="number">${r.output_files.length}</td>
          <td>${mailText(r.deliveries)}</td>
        </tr>`)}
      </tbody>
    </table>
    <${Pager} paging=${paging} nextCursor=${runs.data.next_cursor} label="Runs" />`;
}

function mailText(deliveries) {
  if (!deliveries.length) return "—";
  const sent = deliveries.filter((d) => d.status === "sent").length;
  return `${sent} sent${sent < deliveries.length ? `, ${deliveries.length - sent} failed` : ""}`;
}

function AgentFields({ agent: a }) {
  return html`
    <dl class="fields">
      <dt>Description</dt><dd>${a.description || "—"}</dd>
      ${a.kind === "llm" && html`<dt>Instructions</dt><dd><pre class="text">${a.instructions || "—"}</pre></dd>
        <dt>Model</dt><dd>${a.model || "the platform's default"}</dd>
        <dt>Handles file drops</dt><dd>${a.handles_file_drops ? "yes" : "no"}</dd>`}
      <dt>Schedule</dt><dd>${schedule(a)}</dd>
      <dt>Active</dt><dd>${a.active ? "yes" : "no: runs only when started"}</dd>
      <dt>Mail the output</dt><dd>${a.delivery_enabled ? `files matching ${a.delivery_file_pattern} to ${a.delivery_recipients.join(", ")}` : "no"}</dd>
      ${a.mentions.length > 0 && html`<dt>Mentions</dt><dd>${a.mentions.map((m) => `${m.label || m.id} (${m.type})`).join(", ")}</dd>`}
    </dl>`;
}

const timeZones = () => (typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : []);
const number = (text) => (String(text).trim() === "" ? null : Number(text));

function EditAgent({ agent: a, onSaved }) {
  const llm = a.kind === "llm";
  const [form, setForm] = useState({
    name: a.name, description: a.description || "", instructions: a.instructions || "", model: a.model || "",
    cadence: a.cadence, hour: a.hour ?? "", minute: a.minute ?? "", day_of_week: a.day_of_week ?? 1,
    timezone: a.timezone, active: a.active, handles_file_drops: a.handles_file_drops,
    delivery_enabled: a.delivery_enabled, delivery_recipients: a.delivery_recipients.join("\n"),
    delivery_file_pattern: a.delivery_file_pattern,
  });
  const [status, setStatus] = useState("");
  const [error, setError] = useState(null);
  const set = (field) => (e) => setForm({ ...form, [field]: e.currentTarget.type === "checkbox" ? e.currentTarget.checked : e.currentTarget.value });

  async function submit(event) {
    event.preventDefault();
    setError(null);
    const body = {
      name: form.name, description: form.description, cadence: form.cadence, timezone: form.timezone.trim(),
      active: form.active, delivery_enabled: form.delivery_enabled,
      delivery_recipients: form.delivery_recipients.split(/[\s,;]+/).filter(Boolean),
      delivery_file_pattern: form.delivery_file_pattern,
      minute: form.cadence === "manual" ? null : number(form.minute),
      hour: NEEDS_HOUR.has(form.cadence) ? number(form.hour) : null,
      day_of_week: form.cadence === "weekly" ? Number(form.day_of_week) : null,
    };
    if (llm) Object.assign(body, { instructions: form.instructions, model: form.model.trim() || null,
      handles_file_drops: form.handles_file_drops });
    try {
      const saved = await api(agentPath(a.id), { method: "PATCH", body });
      setStatus(`Saved ${saved.name}.`);
      onSaved();
    } catch (failed) { setError(failed); setStatus(""); }
  }

  const c = form.cadence;
  return html`
    <form class="agent-form" onSubmit=${submit}>
      <label for="agent-name">Name</label>
      <input id="agent-name" value=${form.name} onInput=${set("name")} required />
      <label for="agent-description">Description</label>
      <input id="agent-description" value=${form.description} onInput=${set("description")} />
      ${llm && html`
        <label for="agent-instructions">Instructions</label>
        <textarea id="agent-instructions" rows="6" value=${form.instructions} onInput=${set("instructions")}></textarea>
        <label for="agent-model">Model</label>
        <input id="agent-model" value=${form.model} onInput=${set("model")} aria-describedby="agent-model-help" />
        <p id="agent-model-help" class="muted">Empty: the platform's default.</p>`}
      <fieldset>
        <legend>Schedule</legend>
        <label for="agent-cadence">Cadence</label>
        <select id="agent-cadence" value=${c} onChange=${set("cadence")}>
          ${CADENCES.map((x) => html`<option value=${x}>${x}</option>`)}
        </select>
        ${c === "weekly" && html`<label for="agent-day">Day of the week</label>
          <select id="agent-day" value=${String(form.day_of_week)} onChange=${set("day_of_week")}>
            ${DAYS.map((d, i) => html`<option value=${String(i)}>${d}</option>`)}
          </select>`}
        ${NEEDS_HOUR.has(c) && html`<label for="agent-hour">Hour (0–23)</label>
          <input id="agent-hour" type="number" min="0" max="23" value=${form.hour} onInput=${set("hour")} />`}
        ${c !== "manual" && html`<label for="agent-minute">Minute (0–59)</label>
          <input id="agent-minute" type="number" min="0" max="59" value=${form.minute} onInput=${set("minute")} />`}
        <label for="agent-timezone">Time zone</label>
        <input id="agent-timezone" list="agent-timezones" value=${form.timezone} onInput=${set("timezone")} />
        <datalist id="agent-timezones">${timeZones().map((z) => html`<option value=${z} />`)}</datalist>
        <div class="check"><input id="agent-active" type="checkbox" checked=${form.active} onChange=${set("active")} />
          <label for="agent-active">Active (scheduled; an inactive agent runs only when started)</label></div>
      </fieldset>
      ${llm && html`<div class="check"><input id="agent-drops" type="checkbox" checked=${form.handles_file_drops} onChange=${set("handles_file_drops")} />
        <label for="agent-drops">Handles files dropped in the app</label></div>`}
      <fieldset>
        <legend>Mail the output</legend>
        <div class="check"><input id="agent-delivery" type="checkbox" checked=${form.delivery_enabled} onChange=${set("delivery_enabled")} />
          <label for="agent-delivery">Mail output files after each completed run</label></div>
        <label for="agent-recipients">Recipients</label>
        <textarea id="agent-recipients" rows="2" value=${form.delivery_recipients} onInput=${set("delivery_recipients")} aria-describedby="agent-recipients-help"></textarea>
        <p id="agent-recipients-help" class="muted">Email addresses, one a line or separated by commas.</p>
        <label for="agent-pattern">Files mailed (pattern)</label>
        <input id="agent-pattern" value=${form.delivery_file_pattern} onInput=${set("delivery_file_pattern")} />
      </fieldset>
      <button type="submit">Save</button>
      <${Problem} error=${error} what="save the agent" />
      <${Status} text=${status} />
    </form>`;
}

function InputFiles({ agent, onChanged }) {
  const [status, setStatus] = useState("");
  const [error, setError] = useState(null);
  const files = agent.input_files;

  async function attach(event) {
    const input = event.currentTarget;
    const [file] = input.files;
    if (!file) return;
    setError(null);
    if (file.size > MAX_FILE_BYTES) { // refused before it is read: the service would refuse it anyway
      setStatus("");
      setError(Object.assign(new Error(`${file.name} is ${file.size} bytes; at most ${MAX_FILE_BYTES} bytes (${bytes(MAX_FILE_BYTES)}) can be attached here`), { errors: [] }));
      input.value = "";
      return;
    }
    setStatus(`Attaching ${file.name}…`);
    try {
      const content = await new Promise((resolve, reject) => {
        const reader = new FileReader();
        reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
        reader.onerror = () => reject(reader.error);
        reader.readAsDataURL(file);
      });
      await api(`${agentPath(agent.id)}/files`, { method: "POST",
        body: { filename: file.name, content_type: file.type || undefined, content_base64: content } });
      setStatus(`Attached ${file.name}.`);
      input.value = "";
      onChanged();
    } catch (failed) { setError(failed); setStatus(""); }
  }

  async function remove(file) {
    setError(null);
    try {
      await api(`${agentPath(agent.id)}/files/${file.id}`, { method: "DELETE" });
      setStatus(`Removed ${file.filename}.`);
      onChanged();
      return true;
    } catch (failed) { setError(failed); setStatus(""); return false; }
  }

  return html`
    ${files.length ? html`<${FileTable} files=${files} caption="Input files, read by every run"
        remove=${can("admin") ? remove : null} />` : html`<p>No input files.</p>`}
    ${can("admin") && html`<div class="toolbar"><div><label for="agent-file">Attach a file (at most 3.5 MB)</label>
      <input id="agent-file" type="file" onChange=${attach} /></div></div>`}
    <${Problem} error=${error} what="change the input files" />
    <${Status} text=${status} />`;
}

function FileTable({ files, caption, remove }) {
  return html`
    <table class="files">
      <caption class="visually-hidden">${caption}</caption>
      <thead><tr><th scope="col">File</th><th scope="col">Type</th><th scope="col" class="number">Size</th>
        <th scope="col">Added</th>${remove && html`<th scope="col">Remove</th>`}</tr></thead>
      <tbody>
        ${files.map((f) => html`<tr key=${f.id}>
          <td>${webUrl(f.url) ? html`<a href=${webUrl(f.url)} download=${f.filename}>${f.filename}</a>` : f.filename}</td>
          <td>${f.content_type}</td>
          <td class="number">${bytes(f.byte_size)}</td>
          <td><${When} iso=${f.created_at} /></td>
          ${remove && html`<td><${Confirm} label="Remove" name=${`Remove ${f.filename}`}
            question=${`Remove ${f.filename}? Runs no longer read it.`} yes="Yes, remove" onYes=${() => remove(f)} /></td>`}
        </tr>`)}
      </tbody>
    </table>`;
}

function RunPage({ agentId, runId }) {
  const agent = useApi(agentPath(agentId));
  const run = useApi(`${agentPath(agentId)}/runs/${encodeURIComponent(runId)}`);
  const [status, setStatus] = useState("");
  usePoll((signal) => Promise.all([run.refresh(signal), agent.refresh(signal)]), POLL_MS,
    Boolean(run.data && ACTIVE.has(run.data.status)));
  const back = html`<p><a href=${`#/agents/${agentId}`}>${agent.data ? agent.data.name : "The agent"}</a></p>`;
  if (run.error) return html`${back}<${Problem} error=${run.error} what="load the run" />`;
  if (!run.data) return html`${back}<p>Loading the run…</p>`;
  const r = run.data;
  return html`
    ${back}
    <h2>Run ${r.id}</h2>
    <div aria-live="polite"><p class="run-line">Status: <${RunStatus} status=${r.status} /></p></div>
    ${r.status === "waiting_for_verification" && agent.data?.browser?.needs_verification
      && html`<${Verification} agent=${agent.data} runId=${r.id} onGiven=${(text) => { setStatus(text); run.reload(); agent.reload(); }} />`}
    <${Status} text=${status} />
    ${r.error_message && html`<p class="error">${r.error_message}</p>`}
    <dl class="fields">
      <dt>Trigger</dt><dd>${r.trigger}</dd>
      <dt>Queued</dt><dd><${When} iso=${r.created_at} /></dd>
      <dt>Started</dt><dd><${When} iso=${r.started_at} /></dd>
      <dt>Ended</dt><dd><${When} iso=${r.completed_at} /></dd>
      <dt>Took</dt><dd>${duration(r)}</dd>
      <dt>Model</dt><dd>${r.usage.model || "—"}${r.usage.input_tokens || r.usage.output_tokens ? ` · ${r.usage.input_tokens} tokens in, ${r.usage.output_tokens} out` : ""}</dd>
      ${r.file_import_id && html`<dt>Imported</dt><dd><a href=${`#/imports/${r.file_import_id}`}>file import ${r.file_import_id}</a></dd>`}
    </dl>
    <section aria-labelledby="steps-title">
      <h3 id="steps-title">Steps</h3>
      ${r.steps.length ? html`<ol class="run-steps">${r.steps.map((s, i) => html`<li class=${s.failed ? "step-failed" : ""} data-step=${s.name}>
        <p class="step-name"><span class="chain-position">${i + 1}</span> ${s.name}${s.failed ? html` <strong class="break">failed</strong>` : ""}</p>
        ${s.input !== null && s.input !== undefined && s.input !== "" && html`<p class="step-label">Input</p><pre class="text">${typeof s.input === "string" ? s.input : JSON.stringify(s.input, null, 2)}</pre>`}
        ${s.result_preview && html`<p class="step-label">${s.name === "final_answer" ? "Answer" : "Result"}</p><pre class="text">${s.result_preview}</pre>`}
      </li>`)}</ol>` : html`<p>No steps${ACTIVE.has(r.status) ? " yet" : ""}.</p>`}
    </section>
    <section aria-labelledby="output-title">
      <h3 id="output-title">Files</h3>
      ${r.output_files.length ? html`<${FileTable} files=${r.output_files} caption="Files the run wrote" />` : html`<p>No files.</p>`}
    </section>
    <section aria-labelledby="mail-title">
      <h3 id="mail-title">Mail</h3>
      ${r.deliveries.length ? html`<table class="mail">
        <caption class="visually-hidden">Messages the run sent</caption>
        <thead><tr><th scope="col">Recipient</th><th scope="col">Status</th><th scope="col">Message id</th><th scope="col">Error</th></tr></thead>
        <tbody>${r.deliveries.map((d) => html`<tr class=${d.status === "failed" ? "leak-row" : ""}>
          <td>${d.recipient}</td><td>${d.status}</td><td>${d.message_id || "—"}</td><td>${d.error || "—"}</td></tr>`)}</tbody>
      </table>` : html`<p>No mail.</p>`}
    </section>`;
}
