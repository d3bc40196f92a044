// Bulk actions on the exception queue (preparers and above; docs/bulk-actions.md): the rows ticked on
// the page, or every exception the applied filters match, assigned, moved to a status or commented in
// one POST /v1/reconciliation_exceptions/bulk; its progress and each item the service did not do, with
// its reason, from GET /v1/bulk_actions/{id} (bulk.js).
import { useEffect, useRef, useState } from "preact/hooks";
import { html } from "./api.js";
import { BulkProgress, useBulk } from "./bulk.js";
import { count, personName, STATUSES } from "./exceptions.js";

const BOOLEANS = ["unassigned", "overdue"];
const NUMBERS = ["reconciliation_id", "assignee_user_id", "amount_min", "amount_max", "amount_decimal_places",
  "older_than_days"];
const MAX_FILTERED = 10000; // what a filter may select (the service refuses more, 422)

// The list route's path as a bulk action's filter: {filter} or {why} it cannot be one.
export function bulkFilter(path) {
  const given = new URLSearchParams(path.split("?")[1] || "");
  const filter = {};
  for (const [name, value] of given) {
    if (["sort", "offset", "limit"].includes(name)) continue;
    if (BOOLEANS.includes(name)) filter[name] = value === "true";
    else if (NUMBERS.includes(name)) {
      if (!Number.isSafeInteger(Number(value))) return { why: `${name} is too large` };
      filter[name] = Number(value);
    } else filter[name] = value;
  }
  return { filter };
}

// A row's tick box, or (without `exception`) the page's: every row of the page at once.
export function Selector({ exception, selection }) {
  const { selected, setSelected, rows } = selection;
  if (!exception) {
    const all = rows.length > 0 && rows.every((e) => selected.has(e.id));
    return html`<input type="checkbox" id="exc-select-page" checked=${all} disabled=${!rows.length}
      aria-label="Select every exception on this page"
      onChange=${(ev) => setSelected(ev.currentTarget.checked ? new Set(rows.map((e) => e.id)) : new Set())} />`;
  }
  return html`<input type="checkbox" id=${`exc-select-${exception.id}`} checked=${selected.has(exception.id)}
    aria-label=${`Select ${exception.title}`}
    onChange=${(ev) => {
      const on = ev.currentTarget.checked;
      setSelected((before) => {
        const next = new Set(before);
        if (on) next.add(exception.id); else next.delete(exception.id);
        return next;
      });
    }} />`;
}

export function BulkPanel({ path, shown, selected, people, session, onEnded }) {
  const [which, setWhich] = useState("selected"); // or "filter"
  const [action, setAction] = useState("assign");
  const [assignee, setAssignee] = useState("me");
  const [status, setStatus] = useState("investigating");
  const [body, setBody] = useState("");
  const [problem, setProblem] = useState("");
  // The titles of the rows the action was asked on, to name its items (others: "Exception N").
  const titles = useRef(new Map());
  const bulk = useBulk(() => onEnded());
  const byFilter = bulkFilter(path);
  const total = shown ? shown.total : null;
  useEffect(() => { if (byFilter.why && which === "filter") setWhich("selected"); }, [byFilter.why]);

  const howMany = which === "filter" ? total : selected.size;
  async function submit(event) {
    event.preventDefault();
    if (bulk.busy) return;
    setProblem("");
    if (which === "selected" && !selected.size) { setProblem("Tick the exceptions to act on first."); return; }
    if (which === "filter" && byFilter.why) { setProblem(`Every exception the filters match cannot be chosen: ${byFilter.why}.`); return; }
    if (which === "filter" && total > MAX_FILTERED) { setProblem(`The filters match ${count(total)} exceptions; a bulk action takes at most ${count(MAX_FILTERED)}: narrow the filters.`); return; }
    if (action === "comment" && !body.trim()) { setProblem("Write the comment first."); document.getElementById("bulk-body")?.focus(); return; }
    const asked = { action };
    if (action === "assign") asked.user_id = assignee === "me" ? session.user.id : Number(assignee);
    if (action === "status") asked.status = status;
    if (action === "comment") asked.body = body;
    if (which === "filter") asked.filter = byFilter.filter;
    else asked.ids = shown ? shown.data.filter((e) => selected.has(e.id)).map((e) => e.id) : [...selected];
    titles.current = new Map((shown ? shown.data : []).map((e) => [e.id, e.title]));
    await bulk.start("reconciliation_exceptions/bulk", asked);
  }
  const nameOf = (id) => html`<a href=${`#/exceptions/${id}`}>${titles.current.get(id) || `Exception ${id}`}</a>`;
  const words = { assign: "Assign", status: "Change status", comment: "Comment" };
  return html`
    <form class="settings-form bulk-form" onSubmit=${submit} aria-labelledby="bulk-title" novalidate>
      <h2 id="bulk-title">Work many at once</h2>
      <fieldset>
        <legend>Which exceptions</legend>
        <label class="choice"><input type="radio" name="bulk-which" value="selected" checked=${which === "selected"}
          onChange=${() => setWhich("selected")} /> The ${count(selected.size)} selected on this page</label>
        <label class="choice"><input type="radio" name="bulk-which" value="filter" checked=${which === "filter"}
          disabled=${!!byFilter.why || total === null} aria-describedby=${byFilter.why ? "bulk-filter-why" : undefined}
          onChange=${() => setWhich("filter")} /> Every exception the filters match${total === null ? "" : ` (${count(total)})`}</label>
        ${byFilter.why && html`<p class="muted" id="bulk-filter-why">Not with these filters: ${byFilter.why}.</p>`}
      </fieldset>
      <div class="field">
        <label for="bulk-action">Action</label>
        <select id="bulk-action" value=${action} onChange=${(e) => setAction(e.currentTarget.value)}>
          <option value="assign">Assign to a person</option>
          <option value="status">Change the status</option>
          <option value="comment">Comment</option>
        </select>
      </div>
      ${action === "assign" && html`<div class="field">
        <label for="bulk-assignee">Assign to</label>
        <select id="bulk-assignee" value=${assignee} onChange=${(e) => setAssignee(e.currentTarget.value)}>
          <option value="me">Me</option>
          ${people.list.filter((u) => u.id !== session.user.id).map((u) => html`<option value=${String(u.id)}>${personName(u)}</option>`)}
        </select></div>`}
      ${action === "status" && html`<div class="field">
        <label for="bulk-status-to">New status</label>
        <select id="bulk-status-to" value=${status} onChange=${(e) => setStatus(e.currentTarget.value)}>
          ${STATUSES.map((s) => html`<option value=${s}>${s}</option>`)}
        </select></div>`}
      ${action === "comment" && html`<div class="field">
        <label for="bulk-body">Comment</label>
        <textarea id="bulk-body" rows="3" value=${body} onInput=${(e) => setBody(e.currentTarget.value)}></textarea></div>`}
      ${problem && html`<p class="error" role="alert">${problem}</p>`}
      <div class="actions">
        <button type="submit" aria-disabled=${bulk.busy ? "true" : undefined}>${bulk.busy ? "Working…"
          : `${words[action]}: ${howMany === null ? "" : count(howMany)} exception${howMany === 1 ? "" : "s"}`}</button>
      </div>
    </form>
    <${BulkProgress} bulk=${bulk} what="exception" title="Bulk action progress" nameOf=${nameOf} />`;
}
