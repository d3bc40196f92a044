// An exception (#/exceptions/<id>): its aggregates, its records beside the other side's open
// exceptions and theirs, and its work: status, assignees, comments with @mentions, investigations.
// A viewer sees none of the controls (the API refuses them too).
import { useEffect, useRef, useState } from "preact/hooks";
import { api, can, heldForApproval, html, query } from "./api.js";
import { count, MIXED, nameOf, personName, queueHash, RecordDate, StatusBadge, usePeople } from "./exceptions.js";
import { NearMisses } from "./near-misses.js";
import { ManualMatch, PartPaid } from "./partial-payments.js";
import { Money, Pager, Problem, useApi, usePaging, When } from "./ui.js";

// The moves the service allows (domain/reconciliation_exceptions.py EXCEPTION_STATUSES).
const MOVES = {
  open: ["investigating", "dismissed", "resolved"],
  investigating: ["open", "dismissed", "resolved"],
  dismissed: ["open"],
  resolved: ["open"],
};
const RUNNING = ["pending", "running"];
const POLL_MS = 1000;

// "@ada" names the user whose email begins "ada@" (when only one does) or "@ada@example.com" the one
// with that email. Answers {ids, unknown}: the users mentioned, and the handles that name nobody.
export function mentionsIn(text, users) {
  const ids = new Set();
  const unknown = [];
  for (const match of text.matchAll(/(^|[\s(,;])@([\w.+-]+(?:@[\w-]+(?:\.[\w-]+)+)?)/g)) {
    const handle = match[2].replace(/\.+$/, "").toLowerCase();
    const exact = users.filter((u) => u.email.toLowerCase() === handle);
    const local = users.filter((u) => u.email.toLowerCase().split("@")[0] === handle);
    const found = exact.length === 1 ? exact[0] : (local.length === 1 ? local[0] : null);
    if (found) ids.add(found.id); else unknown.push(`@${handle}`);
  }
  return { ids: [...ids], unknown };
}

// The handle a person types for `user`: the email's name when no one else shares it, else the email.
function handleOf(user, users) {
  const local = user.email.split("@")[0];
  return users.filter((u) => u.email.split("@")[0].toLowerCase() === local.toLowerCase()).length === 1 ? local : user.email;
}

function Aggregates({ a, places, currency, label }) {
  return html`
    <dl class="aggregates" aria-label=${label}>
      <div><dt>Records</dt><dd>${count(a.record_count)}</dd></div>
      <div><dt>Net amount</dt><dd>${currency ? html`<${Money} amount=${a.total_amount} places=${places} currency=${currency} />` : MIXED}</dd></div>
      <div><dt>Credits</dt><dd>${count(a.credit_count)}${currency ? html` · <${Money} amount=${a.credit_sum} places=${places} />` : ""}</dd></div>
      <div><dt>Debits</dt><dd>${count(a.debit_count)}${currency ? html` · <${Money} amount=${a.debit_sum} places=${places} />` : ""}</dd></div>
      <div><dt>Awaiting confirmation</dt><dd>${count(a.pending_confirmation_count)}</dd></div>
      <div><dt>Average age</dt><dd>${a.avg_age_days} days</dd></div>
      <div><dt>Oldest record</dt><dd><${RecordDate} iso=${a.oldest_at} /></dd></div>
      <div><dt>Newest record</dt><dd><${RecordDate} iso=${a.newest_at} /></dd></div>
    </dl>`;
}

// `selection` (a preparer's page): a box a row to pick the record for a match by hand (partial-payments.js).
function RecordRows({ records, selection, side, reconciliationId }) {
  return records.map((r) => html`<tr key=${r.id} data-record-id=${r.id}>
    ${selection && html`<td><input type="checkbox" checked=${selection.has(r.id)} aria-label=${`Pick record ${r.id} to match by hand`}
      onChange=${(e) => selection.toggle(r, side, e.currentTarget.checked)} /></td>`}
    <td>${r.date}</td>
    <td class="number"><${Money} amount=${r.amount} places=${r.decimal_places} currency=${r.currency} /></td>
    <td>${r.direction}</td>
    <td>${r.description || "—"}${r.external_id ? html`<div class="muted">${r.external_id}</div>` : ""}
      <${PartPaid} record=${r} reconciliationId=${reconciliationId} /></td>
  </tr>`);
}

function RecordTable({ records, caption, selection, side, reconciliationId }) {
  return html`
    <table class="records">
      <caption>${caption}</caption>
      <thead><tr>${selection && html`<th scope="col"><span class="visually-hidden">Pick</span></th>`}<th scope="col">Date</th>
        <th scope="col" class="number">Amount</th><th scope="col">Direction</th><th scope="col">Description</th></tr></thead>
      <tbody><${RecordRows} records=${records} selection=${selection} side=${side} reconciliationId=${reconciliationId} /></tbody>
    </table>`;
}

// An exception's records, 50 a page (cursor paging), newest first.
function ExceptionRecords({ exception, caption, selection, side }) {
  const paging = usePaging();
  const { data, error } = useApi(`reconciliation_exceptions/${exception.id}/records?limit=50${paging.cursor
    ? `&cursor=${encodeURIComponent(paging.cursor)}` : ""}`);
  if (error) return html`<${Problem} error=${error} what="load the records" />`;
  if (!data) return html`<p>Loading records…</p>`;
  if (!data.data.length) return html`<p>No records left in this exception.</p>`;
  return html`<${RecordTable} records=${data.data} caption=${caption} selection=${selection} side=${side}
      reconciliationId=${exception.reconciliation_id} />
    ${(data.next_cursor || paging.page > 1) && html`<${Pager} paging=${paging} nextCursor=${data.next_cursor} label=${caption} />`}`;
}

function SideColumn({ side, streams, exceptions, current, tick, failure, selection }) {
  return html`
    <section class="side" aria-labelledby=${`side-${side}`}>
      <h3 id=${`side-${side}`}>Side ${side.toUpperCase()}: ${streams.map((s) => s.name).join(", ") || "—"}</h3>
      ${failure ? html`<${Problem} error=${failure} what="load this side's exceptions" />` : exceptions === null ? html`<p>Loading…</p>` : exceptions.length === 0
        ? html`<p class="muted">No open exception on this side.</p>`
        : exceptions.map((e) => html`
          <div class="side-exception" key=${e.id}>
            <h4>${e.id === current ? e.title : html`<a href=${`#/exceptions/${e.id}`}>${e.title}</a>`}
              ${" "}<${StatusBadge} status=${e.status} /></h4>
            <${Aggregates} a=${e.aggregates} places=${e.decimal_places} currency=${e.currency}
              label=${`Aggregates of side ${side.toUpperCase()}: ${e.title}`} />
            <${ExceptionRecords} exception=${e} caption=${`Side ${side.toUpperCase()} records of exception ${e.id}`}
              selection=${selection} side=${side}
              key=${`${e.id}-${tick}`} />
          </div>`)}
    </section>`;
}

// This exception on its side, and the open (or investigating) exceptions of the other side's streams.
function SideBySide({ exception, tick, selection }) {
  const { data: reconciliation, error } = useApi(`reconciliations/${exception.reconciliation_id}`);
  const [others, setOthers] = useState(null);
  const [failure, setFailure] = useState(null);
  const onA = reconciliation ? reconciliation.side_a_streams.some((s) => s.key === exception.data_stream_key) : true;
  const otherStreams = reconciliation ? (onA ? reconciliation.side_b_streams : reconciliation.side_a_streams) : [];
  useEffect(() => {
    if (!reconciliation) return undefined;
    let gone = false;
    setFailure(null);
    // The service filters by status (one a request): the open ones and the investigating ones, ten each.
    Promise.all(otherStreams.flatMap((s) => ["open", "investigating"].map((status) => api(`reconciliation_exceptions${query({
      reconciliation_id: exception.reconciliation_id, data_stream_key: s.key, status, limit: 10 })}`))))
      .then((pages) => { if (!gone) setOthers(pages.flatMap((p) => p.data)); })
      .catch((problem) => { if (!gone) setFailure(problem); });
    return () => { gone = true; };
  }, [reconciliation, exception.id]);
  if (error) return html`<${Problem} error=${error} what="load the reconciliation" />`;
  if (!reconciliation) return html`<p>Loading the reconciliation…</p>`;
  const mine = [exception];
  const a = onA ? mine : others;
  const b = onA ? others : mine;
  return html`
    <section aria-labelledby="records-title">
      <h2 id="records-title">Records side by side</h2>
      <div class="sides">
        <${SideColumn} side="a" streams=${reconciliation.side_a_streams} exceptions=${a} current=${exception.id} tick=${tick} failure=${onA ? null : failure} selection=${selection} />
        <${SideColumn} side="b" streams=${reconciliation.side_b_streams} exceptions=${b} current=${exception.id} tick=${tick} failure=${onA ? failure : null} selection=${selection} />
      </div>
    </section>`;
}

function StatusControl({ exception, act }) {
  const moves = MOVES[exception.status] || [];
  const [target, setTarget] = useState(moves[0]);
  useEffect(() => setTarget(moves[0]), [exception.status]);
  return html`
    <form class="inline" onSubmit=${(e) => { e.preventDefault(); act(`Status changed to ${target}.`,
      () => api(`reconciliation_exceptions/${exception.id}`, { method: "PATCH", body: { status: target } }), false); }}>
      <label for="exc-new-status">Change status to</label>
      <select id="exc-new-status" value=${target} onChange=${(e) => setTarget(e.currentTarget.value)}>
        ${moves.map((m) => html`<option value=${m}>${m}</option>`)}
      </select>
      <button type="submit">Change status</button>
    </form>`;
}

function Assignees({ exception, people, session, act }) {
  const mine = exception.assignees.some((a) => a.user_id === session.user.id);
  const choices = people.list.filter((u) => !exception.assignees.some((a) => a.user_id === u.id));
  const [chosen, setChosen] = useState("");
  const assign = (userId, name) => act(`Assigned to ${name}.`, () => api(`reconciliation_exceptions/${exception.id}/assignees`,
    { method: "POST", body: { user_id: userId } }));
  return html`
    <div class="assignees">
      <h3>Assignees</h3>
      ${exception.assignees.length === 0 ? html`<p class="muted">Nobody is assigned.</p>` : html`
        <ul>${exception.assignees.map((a) => html`<li key=${a.id}>${nameOf(people, a.idp_user_id)}
          ${" "}<button type="button" class="small" aria-label=${`Unassign ${nameOf(people, a.idp_user_id)}`}
            onClick=${() => act(`Unassigned ${nameOf(people, a.idp_user_id)}.`, () => api(
              `reconciliation_exceptions/${exception.id}/assignees/${a.id}`, { method: "DELETE" }))}>Unassign</button></li>`)}</ul>`}
      ${!mine && html`<button type="button" onClick=${() => assign(session.user.id, "you")}>Assign to me</button>`}
      <form class="inline" onSubmit=${(e) => { e.preventDefault(); const u = people.byId.get(Number(chosen)); if (u) assign(u.id, personName(u)); }}>
        <label for="exc-assign-to">Assign to</label>
        <select id="exc-assign-to" value=${chosen} onChange=${(e) => setChosen(e.currentTarget.value)}>
          <option value="">Choose a person</option>
          ${choices.map((u) => html`<option value=${String(u.id)}>${personName(u)} (${u.email})</option>`)}
        </select>
        <button type="submit" disabled=${!chosen}>Assign</button>
      </form>
    </div>`;
}

function Comments({ exception, people, mayWrite, act }) {
  const [body, setBody] = useState("");
  const [pick, setPick] = useState("");
  const [problem, setProblem] = useState("");
  const found = mentionsIn(body, people.list);
  function insert() {
    const user = people.byId.get(Number(pick));
    if (!user) return;
    setBody((text) => `${text}${text && !/\s$/.test(text) ? " " : ""}@${handleOf(user, people.list)} `);
    document.getElementById("exc-comment")?.focus();
  }
  async function post(event) {
    event.preventDefault();
    if (!body.trim()) return setProblem("Write a comment first.");
    if (found.unknown.length) return setProblem(`No user is ${found.unknown.join(", ")}.`);
    setProblem("");
    const ok = await act("Comment posted.", () => api(`reconciliation_exceptions/${exception.id}/comments`,
      { method: "POST", body: { body, mentions: found.ids } }), false);
    if (ok) setBody("");
  }
  return html`
    <section aria-labelledby="comments-title">
      <h2 id="comments-title">Comments (${exception.comments.length})</h2>
      ${exception.comments.length === 0 ? html`<p class="muted">No comments yet.</p>` : html`
        <ol class="comments">${exception.comments.map((c) => html`<li key=${c.id}>
          <p class="comment-head"><strong>${c.author_idp_id === "system" ? "The service" : nameOf(people, c.author_idp_id)}</strong>
            ${" · "}<${When} iso=${c.created_at} /></p>
          <p class="comment-body">${c.body}</p>
          ${c.mentions.length > 0 && html`<p class="muted">Mentions: ${c.mentions.map((id) => personName(people.byId.get(id))).join(", ")}</p>`}
        </li>`)}</ol>`}
      ${mayWrite && html`
        <form class="comment-form" onSubmit=${post}>
          <label for="exc-comment">Comment</label>
          <textarea id="exc-comment" rows="3" value=${body} onInput=${(e) => setBody(e.currentTarget.value)}
            aria-describedby="exc-comment-help exc-comment-problem"></textarea>
          <p id="exc-comment-help" class="muted">Mention a person with @ and their email's name, e.g. @ada.
            ${found.ids.length > 0 && html` Will mention: ${found.ids.map((id) => personName(people.byId.get(id))).join(", ")}.`}</p>
          <div class="inline">
            <label for="exc-mention">Mention</label>
            <select id="exc-mention" value=${pick} onChange=${(e) => setPick(e.currentTarget.value)}>
              <option value="">Choose a person</option>
              ${people.list.map((u) => html`<option value=${String(u.id)}>${personName(u)} (${u.email})</option>`)}
            </select>
            <button type="button" class="secondary" onClick=${insert} disabled=${!pick}>Insert mention</button>
          </div>
          <p id="exc-comment-problem" class="error" role="alert">${problem}</p>
          <button type="submit">Post comment</button>
        </form>`}
    </section>`;
}

function Suggested({ ids, reconciliationId }) {
  const [records, setRecords] = useState(null);
  useEffect(() => {
    let gone = false;
    Promise.all(ids.slice(0, 50).map((id) => api(`records/${id}`).catch(() => null)))
      .then((found) => { if (!gone) setRecords(found.filter(Boolean)); });
    return () => { gone = true; };
  }, [ids.join(",")]);
  if (!records) return html`<p>Loading the suggested records…</p>`;
  return html`<${RecordTable} records=${records} caption="Suggested records of the other side" reconciliationId=${reconciliationId} />`;
}

function Investigation({ exception, mayWork, act }) {
  const latest = exception.investigation;
  const running = latest && RUNNING.includes(latest.status);
  return html`
    <section aria-labelledby="investigation-title">
      <h2 id="investigation-title">Investigation</h2>
      ${!latest && html`<p class="muted">Not investigated yet: an investigation searches the other side's open records for this exception's.</p>`}
      ${running && html`
        <div class="progress-line">
          <progress aria-label="Investigation progress"></progress>
          <span>Investigation ${latest.id} is ${latest.status}…</span>
        </div>`}
      ${latest && latest.status === "failed" && html`<p class="error">Investigation ${latest.id} failed: ${latest.error_message}</p>`}
      ${latest && latest.status === "completed" && html`
        <div class="suggestion" data-testid="suggestion">
          <p><strong>Suggestion:</strong> ${latest.recommendation_text || "no match found."}</p>
          <p class="muted">Confidence ${latest.confidence_score === null ? "—" : `${Math.round(latest.confidence_score * 100)}%`}
            ${" · "}${count(latest.candidate_records_searched)} records searched · finished <${When} iso=${latest.completed_at} /></p>
          ${latest.suggested_record_ids.length > 0 && html`<${Suggested} ids=${latest.suggested_record_ids} reconciliationId=${exception.reconciliation_id} />`}
          ${latest.accepted_match_id ? html`<p>Accepted: match ${latest.accepted_match_id}.</p>`
            : (mayWork && latest.suggested_record_ids.length > 0 && html`
              <button type="button" onClick=${() => act("Suggestion accepted: the records are matched.", () => api(
                `reconciliation_exceptions/${exception.id}/investigations/${latest.id}/accept`, { method: "POST" }))}>Accept the suggestion</button>`)}
        </div>`}
      ${mayWork && html`<button type="button" class=${latest ? "secondary" : ""} disabled=${running}
        onClick=${() => act("Investigation started.", () => api(`reconciliation_exceptions/${exception.id}/investigations`,
          { method: "POST" }))}>${latest ? "Investigate again" : "Start an investigation"}</button>`}
    </section>`;
}

export function ExceptionDetail({ id, route, session }) {
  const { data: exception, error, reload } = useApi(`reconciliation_exceptions/${encodeURIComponent(id)}`);
  const people = usePeople();
  const [message, setMessage] = useState("");
  const [failure, setFailure] = useState(null);
  const [tick, setTick] = useState(0);
  const statusLine = useRef(null);
  const mayWork = can("preparer");
  const [chosen, setChosen] = useState([]); // [{record, side}] picked for a match by hand
  const [matched, setMatched] = useState(0); // matches made here: near misses are read again (they read every open record)
  const selection = mayWork ? {
    has: (recordId) => chosen.some((c) => c.record.id === recordId),
    toggle: (record, side, on) => setChosen((before) => (on ? [...before.filter((c) => c.record.id !== record.id), { record, side }]
      : before.filter((c) => c.record.id !== record.id))),
  } : null;

  // An investigation runs on the service's queue: the detail is read again each second until it ends.
  const running = exception && exception.investigation && RUNNING.includes(exception.investigation.status);
  useEffect(() => {
    if (!running) return undefined;
    const timer = setTimeout(reload, POLL_MS);
    return () => clearTimeout(timer);
  }, [exception]);

  // Runs one change; says what happened in the status line, or what the service answered. True when done.
  // `focus`: whether focus goes to the status line (the control pressed goes or is disabled).
  async function act(done, call, focus = true) {
    setFailure(null);
    setMessage("Saving…");
    try {
      setMessage(heldForApproval(await call()) || done);
      // The button pressed may be gone (Assign to me, Unassign, Accept): focus goes to what happened.
      if (focus) statusLine.current?.focus();
      reload();
      setTick((n) => n + 1);
      return true;
    } catch (problem) {
      setMessage("");
      setFailure(problem);
      return false;
    }
  }

  const back = queueHash(route.params, {});
  if (error) return html`<p><a href=${back}>Back to the queue</a></p><${Problem} error=${error} what="load the exception" />`;
  if (!exception) return html`<p>Loading the exception…</p>`;
  return html`
    <p><a href=${back}>Back to the queue</a></p>
    <article class="exception-detail">
      <h2>${exception.title} <${StatusBadge} status=${exception.status} /></h2>
      <p class="muted">Exception ${exception.id} · ${exception.reconciliation_name} · ${exception.data_stream_name}
        ${" · opened "}<${When} iso=${exception.opened_at} />${exception.closed_at ? html` · closed <${When} iso=${exception.closed_at} />` : ""}</p>
      <p>${exception.description}</p>
      ${exception.refresh_pending && html`<p class="muted">Its records are being brought up to date after a recent match.</p>`}
      <${Aggregates} a=${exception.aggregates} places=${exception.decimal_places} currency=${exception.currency} label="Aggregates" />
      <p class="status" role="status" tabindex="-1" ref=${statusLine} data-testid="exception-status-line">${message}</p>
      ${/^Sent for approval: approval (\d+) /.test(message)
        && html`<p><a href=${`#/approvals/${/approval (\d+)/.exec(message)[1]}`}>Open approval ${/approval (\d+)/.exec(message)[1]}</a></p>`}
      <${Problem} error=${failure} what="do that" />
      ${mayWork ? html`
        <section class="work" aria-labelledby="work-title">
          <h2 id="work-title">Work on it</h2>
          <${StatusControl} exception=${exception} act=${act} />
          <${Assignees} exception=${exception} people=${people} session=${session} act=${act} />
        </section>` : html`
        <section aria-labelledby="work-title">
          <h2 id="work-title">Assignees</h2>
          <p>${exception.assignees.length ? exception.assignees.map((a) => nameOf(people, a.idp_user_id)).join(", ") : "Nobody is assigned."}</p>
        </section>`}
      <${Investigation} exception=${exception} mayWork=${mayWork} act=${act} />
      <${NearMisses} exception=${exception} tick=${matched} />
      ${mayWork && html`<${ManualMatch} reconciliationId=${exception.reconciliation_id} chosen=${chosen}
        onRemove=${(recordId) => setChosen((before) => before.filter((c) => c.record.id !== recordId))}
        onMatched=${() => { setChosen([]); reload(); setTick((n) => n + 1); setMatched((n) => n + 1); }} />`}
      <${SideBySide} exception=${exception} tick=${tick} selection=${selection} />
      <${Comments} exception=${exception} people=${people} mayWrite=${mayWork} act=${act} />
    </article>`;
}
