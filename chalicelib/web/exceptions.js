// The exception queue (#/exceptions) and, at #/exceptions/<id>, an exception's detail
// (exceptions-detail.js). The filters live in the hash's query (#/exceptions?status=open&min=10.00),
// so a reload or a shared link keeps them; every row's aggregates come with the one list request.
// A preparer ticks rows (or takes every exception the filters match) for a bulk action (exceptions-bulk.js).
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { api, can, html, minorUnits, query } from "./api.js";
import { ExceptionDetail } from "./exceptions-detail.js";
import { ExportButton, exportFilters } from "./export.js";
import { BulkPanel, Selector } from "./exceptions-bulk.js";
import { appliedOption, Money, Problem, useAll, When } from "./ui.js";

export const PAGE_SIZE = 50;
export const STATUSES = ["open", "investigating", "dismissed", "resolved"];
const SORTS = [["newest", "Newest first"], ["oldest", "Oldest record first"], ["amount", "Largest amount first"]];
// The filters as the hash names them (short, readable in a link), in the form's order.
// `reconciliation_id` is the name other pages link with; `reconciliation` (older links) is still read.
const FILTERS = ["reconciliation_id", "status", "assignee", "stream", "min", "max", "older", "severity", "due", "age",
  "sort"];
// Service levels (docs/service-levels.md): the severities, and the aging buckets with their words.
export const SEVERITIES = ["low", "medium", "high", "critical"];
const AGES = [["0_1d", "Under a day"], ["1_3d", "1 to 3 days"], ["3_7d", "3 to 7 days"], ["7_30d", "7 to 30 days"],
  ["30d_plus", "30 days or more"]];
// What the export of the filtered queue cannot take (its filters are the list's, without these).
const NOT_EXPORTED = ["severity", "overdue", "age_bucket"];

// The users of the environment, by id and by provider id (assignees, authors and mentions name them).
export function usePeople() {
  const { data, error } = useAll("users");
  const list = data ? data.data.filter((u) => u.status !== "deactivated") : [];
  const byId = new Map(list.map((u) => [u.id, u]));
  const byIdp = new Map((data ? data.data : []).map((u) => [u.idp_user_id, u]));
  return { list, byId, byIdp, error };
}

// Like ui.js's useApi, but the answer is known to be that of `path`: while a new path loads, `loading`
// holds from the first render (useApi's flag turns on in an effect, a render later), so the count
// never shows the previous filters' total as the new one's.
function useAnswer(path, tick = 0) {
  const [state, setState] = useState({ path: null });
  useEffect(() => {
    if (!path) return undefined;
    const abort = new AbortController();
    api(path, { signal: abort.signal })
      .then((data) => setState({ path, data }))
      .catch((error) => { if (error.name !== "AbortError") setState({ path, error }); });
    return () => abort.abort();
  }, [path, tick]);
  return { data: state.data, error: state.path === path ? state.error : undefined, loading: state.path !== path };
}

// A record date the service sends as midnight UTC ("2026-11-09T00:00:00Z"): shown as the date it is,
// in any time zone (a local time would move it to the day before west of Greenwich).
export function RecordDate({ iso }) {
  if (!iso) return html`<span>—</span>`;
  return html`<time datetime=${iso.slice(0, 10)} title=${iso}>${iso.slice(0, 10)}</time>`;
}

export const personName = (user) => (user ? user.name || user.email : "someone");

// The name of the person with identity `idp`: from the list of users, else from `known` (a user the
// page knows otherwise, such as the signed-in one), else the identity itself.
export const nameOf = (people, idp, known = null) => (people.byIdp.has(idp) ? personName(people.byIdp.get(idp))
  : (known ? personName(known) : idp));

// A person's "1,234" (grouped digits) of an integer count.
export const count = (n) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");

// How many decimal places a typed amount has ("10.125" -> 3); at least 2.
function placesOf(...texts) {
  return Math.max(2, ...texts.map((t) => ((t || "").split(".")[1] || "").trim().length));
}

const reconciliationOf = (params) => params.get("reconciliation_id") || params.get("reconciliation") || undefined;

// The hash's filters as the list route's query; `problems` names the fields that are no amount or age.
export function listQuery(params, session) {
  const problems = {};
  const min = params.get("min") || "";
  const max = params.get("max") || "";
  const places = placesOf(min, max);
  const amount = (name, text) => {
    if (!text) return undefined;
    const units = minorUnits(text, places);
    if (units === null) problems[name] = "Type an amount such as 1,250.00";
    return units === null ? undefined : units.toString();
  };
  const older = params.get("older") || "";
  if (older && !/^\d{1,5}$/.test(older)) problems.older = "Type a whole number of days";
  const assignee = params.get("assignee") || "";
  const amountMin = amount("min", min);
  const amountMax = amount("max", max);
  if (amountMin !== undefined && amountMax !== undefined && BigInt(amountMin) > BigInt(amountMax)) {
    problems.max = "The largest amount is below the smallest";
  }
  const offset = Number(params.get("offset") || 0);
  return {
    problems,
    path: `reconciliation_exceptions${query({
      reconciliation_id: reconciliationOf(params), status: params.get("status"),
      data_stream_key: params.get("stream"),
      assignee_user_id: assignee === "me" ? session.user.id : (/^\d+$/.test(assignee) ? assignee : undefined),
      unassigned: assignee === "unassigned" ? "true" : undefined,
      amount_min: amountMin, amount_max: amountMax,
      amount_decimal_places: amountMin !== undefined || amountMax !== undefined ? places : undefined,
      older_than_days: problems.older ? undefined : older,
      severity: SEVERITIES.includes(params.get("severity")) ? params.get("severity") : undefined,
      overdue: ["true", "false"].includes(params.get("due")) ? params.get("due") : undefined,
      age_bucket: AGES.some(([value]) => value === params.get("age")) ? params.get("age") : undefined,
      sort: params.get("sort") === "newest" ? undefined : params.get("sort"),
      offset: Number.isSafeInteger(offset) && offset > 0 ? offset : undefined, limit: PAGE_SIZE,
    })}`,
  };
}

// The queue's hash for `params` (URLSearchParams, or an object such as {reconciliation_id: 3, status:
// "open"}) with `changes` applied; empty values are dropped. Other pages link into the queue with it.
export function queueHash(params = {}, changes = {}) {
  const given = params instanceof URLSearchParams;
  const next = new URLSearchParams(given ? params : undefined);
  if (next.has("reconciliation") && !next.has("reconciliation_id")) { // an older link's name
    next.set("reconciliation_id", next.get("reconciliation"));
  }
  next.delete("reconciliation");
  for (const [key, value] of Object.entries(given ? changes : { ...params, ...changes })) {
    if (value === undefined || value === null || value === "") next.delete(key); else next.set(key, String(value));
  }
  const text = next.toString();
  return `#/exceptions${text ? `?${text}` : ""}`;
}

// A link to a reconciliation's active exceptions whose list holds as many as it says: the queue filters
// one status, so "3 exceptions" links to the open ones when none is investigating, and otherwise each
// status gets its own link ("3 exceptions: 2 open, 1 investigating").
export function ActiveExceptionsLink({ reconciliationId, open, investigating }) {
  const total = open + investigating;
  const noun = `exception${total === 1 ? "" : "s"}`;
  const to = (status) => queueHash({ reconciliation_id: reconciliationId, status });
  if (!investigating) return html`<a href=${to("open")}>${count(total)} ${noun}</a>`;
  if (!open) return html`<a href=${to("investigating")}>${count(total)} ${noun}</a> <span class="muted">(investigating)</span>`;
  return html`<span>${count(total)} ${noun}: <a href=${to("open")}>${count(open)} open</a>,
    ${" "}<a href=${to("investigating")}>${count(investigating)} investigating</a></span>`;
}

function Filters({ params, problems, reconciliations, streams, people }) {
  const reconciliationId = reconciliationOf(params);
  const assignee = params.get("assignee") || "";
  const stream = params.get("stream") || "";
  function apply(event) {
    event.preventDefault();
    const form = new FormData(event.currentTarget);
    const changes = Object.fromEntries(FILTERS.map((name) => [name, (form.get(name) || "").trim()]));
    if (changes.sort === "newest") changes.sort = ""; // the default order stays out of the link
    location.hash = queueHash(new URLSearchParams(), changes); // the offset goes: a new filter, page 1
    // The form is made again for the new filters (its key), so focus goes to the count it answers with.
    document.getElementById("exc-count")?.focus();
  }
  const field = (name, label, input) => html`
    <div class="field">
      <label for=${`exc-${name}`}>${label}</label>
      ${input}
      ${problems[name] && html`<span class="error" id=${`exc-${name}-problem`}>${problems[name]}</span>`}
    </div>`;
  const invalid = (name) => (problems[name] ? { "aria-invalid": "true", "aria-describedby": `exc-${name}-problem` } : {});
  // A key (the params' values) re-creates the form when the hash changes, so it shows what is applied.
  // Its fields are uncontrolled (defaultValue, an option `selected`): a list that arrives while a person
  // is choosing (every page of the people, say) draws the form again, and must not undo their choice.
  return html`
    <form class="toolbar exception-filters" onSubmit=${apply} aria-label="Filter the exceptions" key=${params.toString()}>
      ${field("reconciliation_id", "Reconciliation", html`
        <select id="exc-reconciliation_id" name="reconciliation_id">
          <option value="">All</option>
          ${reconciliations.map((r) => html`<option value=${String(r.id)} selected=${String(r.id) === reconciliationId}>${r.name}</option>`)}
          ${appliedOption(reconciliationId, reconciliations.some((r) => String(r.id) === reconciliationId),
            `Reconciliation ${reconciliationId}`)}
        </select>`)}
      ${field("status", "Status", html`
        <select id="exc-status" name="status">
          <option value="">Any</option>
          ${STATUSES.map((s) => html`<option value=${s} selected=${s === params.get("status")}>${s}</option>`)}
        </select>`)}
      ${field("assignee", "Assignee", html`
        <select id="exc-assignee" name="assignee">
          <option value="">Anyone</option>
          <option value="me" selected=${assignee === "me"}>Me</option>
          <option value="unassigned" selected=${assignee === "unassigned"}>Unassigned</option>
          ${people.list.map((u) => html`<option value=${String(u.id)} selected=${String(u.id) === assignee}>${personName(u)}</option>`)}
          ${appliedOption(/^\d+$/.test(assignee) ? assignee : "", people.list.some((u) => String(u.id) === assignee),
            `User ${assignee}`)}
        </select>`)}
      ${field("stream", "Data stream", html`
        <select id="exc-stream" name="stream">
          <option value="">All</option>
          ${streams.map((s) => html`<option value=${s.key} selected=${s.key === stream}>${s.name}</option>`)}
          ${appliedOption(stream, streams.some((s) => s.key === stream), stream)}
        </select>`)}
      ${field("min", "Amount from", html`
        <input id="exc-min" name="min" inputmode="decimal" size="10" defaultValue=${params.get("min") || ""} ...${invalid("min")} />`)}
      ${field("max", "Amount to", html`
        <input id="exc-max" name="max" inputmode="decimal" size="10" defaultValue=${params.get("max") || ""} ...${invalid("max")} />`)}
      ${field("older", "Older than (days)", html`
        <input id="exc-older" name="older" inputmode="numeric" size="5" defaultValue=${params.get("older") || ""} ...${invalid("older")} />`)}
      ${field("severity", "Severity", html`
        <select id="exc-severity" name="severity">
          <option value="">Any</option>
          ${SEVERITIES.map((s) => html`<option value=${s} selected=${s === params.get("severity")}>${s}</option>`)}
        </select>`)}
      ${field("due", "Due", html`
        <select id="exc-due" name="due">
          <option value="">Any</option>
          <option value="true" selected=${params.get("due") === "true"}>Overdue</option>
          <option value="false" selected=${params.get("due") === "false"}>Not overdue</option>
        </select>`)}
      ${field("age", "Age", html`
        <select id="exc-age" name="age">
          <option value="">Any</option>
          ${AGES.map(([value, label]) => html`<option value=${value} selected=${value === params.get("age")}>${label}</option>`)}
        </select>`)}
      ${field("sort", "Order", html`
        <select id="exc-sort" name="sort">
          ${SORTS.map(([value, label]) => html`<option value=${value} selected=${value === (params.get("sort") || "newest")}>${label}</option>`)}
        </select>`)}
      <div class="field actions">
        <button type="submit">Apply filters</button>
        <a href="#/exceptions" class="clear">Clear</a>
      </div>
    </form>`;
}

// What an exception whose records are in several currencies (its currency null) amounts to: no one
// number, since its sums add amounts of different currencies.
export const MIXED = "several currencies";

export function StatusBadge({ status }) {
  return html`<span class=${`badge status-${status}`}>${status}</span>`;
}

// An exception's severity and due time (null on an answer of an older API: nothing shown).
export function DueCell({ exception: e }) {
  if (!e.severity) return html`<td class="muted">—</td>`;
  return html`<td data-testid=${`due-${e.id}`}><span class=${`badge severity-${e.severity}`}>${e.severity}</span>
    ${e.due_at && html` <${When} iso=${e.due_at} />`}
    ${e.overdue && html` <span class="badge overdue">overdue</span>`}</td>`;
}

// The row's assignees and, for a preparer (or above) not among them, "Assign to me": the assignment is
// made through the API and the row shows it in place (no reload of the page); focus stays in the row,
// on its assignees' cell, which says what happened.
function Assignees({ exception: e, people, session, onSaid }) {
  // What this row added or failed, for this answer's exception only (a new answer holds it already).
  const [done, setDone] = useState({ of: null, added: [], failure: null });
  const [busy, setBusy] = useState(false);
  const cell = useRef(null);
  const mineNow = done.of === e;
  const added = mineNow ? done.added : [];
  const failure = mineNow ? done.failure : null;
  const assignees = [...e.assignees, ...added.filter((a) => !e.assignees.some((b) => b.id === a.id))];
  const mine = assignees.some((a) => a.user_id === session.user.id);
  const nameOfAssignee = (x) => nameOf(people, x.idp_user_id, x.user_id === session.user.id ? session.user : null);
  async function assignToMe() {
    if (busy) return;
    setBusy(true);
    try {
      const assignee = await api(`reconciliation_exceptions/${e.id}/assignees`, { method: "POST", body: { user_id: session.user.id } });
      setDone({ of: e, added: [...added, assignee], failure: null });
      onSaid(`Assigned ${e.title} to you.`);
      // The button is gone: focus stays in its row, unless the person has moved it elsewhere meanwhile.
      const at = document.activeElement;
      if (cell.current && (!at || at === document.body || cell.current.closest("tr")?.contains(at))) cell.current.focus();
    } catch (problem) {
      setDone({ of: e, added, failure: problem });
    } finally {
      setBusy(false);
    }
  }
  // Its name is its visible words, then the title (WCAG's label in name), from its text, so the name
  // follows the words while busy. The whole name is one hidden text: a visually hidden span beside the
  // visible words would get a space before it (it is laid out as a block), "Assign to me : …".
  const words = busy ? "Assigning…" : "Assign to me";
  return html`<td tabindex="-1" ref=${cell} data-testid=${`assignees-${e.id}`}>
    ${assignees.length ? assignees.map(nameOfAssignee).join(", ") : html`<span class="muted">unassigned</span>`}
    ${can("preparer") && !mine && html`
      <div><button type="button" class="small" aria-disabled=${busy ? "true" : undefined} onClick=${assignToMe}>
        <span aria-hidden="true">${words}</span><span class="visually-hidden">${words}: ${e.title}</span></button></div>`}
    ${failure && html`<p class="error" role="alert">Could not assign ${e.title}: ${failure.message}</p>`}
  </td>`;
}

function Row({ exception: e, people, back, session, onSaid, selection }) {
  const a = e.aggregates;
  return html`<tr>
    ${selection && html`<td><${Selector} exception=${e} selection=${selection} /></td>`}
    <td><a href=${`#/exceptions/${e.id}${back ? `?${back}` : ""}`}>${e.title}</a>
      <div class="muted">#${e.id} · ${e.reconciliation_name || `reconciliation ${e.reconciliation_id}`} ·
        ${e.data_stream_name || e.data_stream_key}</div></td>
    <td><${StatusBadge} status=${e.status} />${e.refresh_pending ? html` <span class="muted">(updating)</span>` : ""}</td>
    <${Assignees} exception=${e} people=${people} session=${session} onSaid=${onSaid} />
    <td class="number">${count(a.record_count)}</td>
    ${e.currency ? html`
      <td class="number"><${Money} amount=${a.total_amount} places=${e.decimal_places} currency=${e.currency} /></td>
      <td class="number"><${Money} amount=${a.credit_sum} places=${e.decimal_places} /> / <${Money} amount=${a.debit_sum} places=${e.decimal_places} /></td>`
      : html`<td class="number muted">${MIXED}</td><td class="number muted">${MIXED}</td>`}
    <td><${RecordDate} iso=${a.oldest_at} /></td>
    <td><${When} iso=${e.opened_at} /></td>
    <${DueCell} exception=${e} />
  </tr>`;
}

function exportable(path) {
  const filters = exportFilters(path);
  for (const name of NOT_EXPORTED) delete filters[name];
  return filters;
}

function Queue({ route, session }) {
  const params = route.params;
  const { problems, path } = listQuery(params, session);
  const invalid = Object.keys(problems).length > 0;
  const [tick, setTick] = useState(0); // a bulk action that ended reads the page again
  const { data, error, loading } = useAnswer(invalid ? null : path, tick);
  const reconciliations = useAll("reconciliations").data;
  const streams = useAll("data_streams").data;
  const people = usePeople();
  // What a row's action did, announced politely: emptied first, so the same words said again are
  // announced again, and when the filters (or page) change, since it was said of other rows.
  const [said, setSaid] = useState("");
  const saying = useRef(null);
  useEffect(() => { clearTimeout(saying.current); setSaid(""); }, [route.key]);
  useEffect(() => () => clearTimeout(saying.current), []);
  const say = useCallback((text) => {
    clearTimeout(saying.current);
    setSaid("");
    saying.current = setTimeout(() => setSaid(text), 100);
  }, []);
  // While the next filters' (or page's) rows load, the previous ones are not shown as theirs.
  const shown = loading || invalid ? null : data;
  const offset = shown ? shown.offset : 0;
  const announced = shown ? `${count(shown.total)} exception${shown.total === 1 ? "" : "s"}` : "";
  const pastEnd = shown && shown.data.length === 0 && shown.total > 0 && offset >= shown.total;

  const back = params.toString();
  const from = shown && shown.data.length ? offset + 1 : 0;
  const to = shown ? offset + shown.data.length : 0;
  const go = (where) => { location.hash = queueHash(params, { offset: where || undefined }); document.getElementById("exc-count")?.focus(); };
  const pages = shown ? Math.max(1, Math.ceil(shown.total / PAGE_SIZE)) : 1;
  // Bulk actions (preparers and above): the rows ticked on this page, or every exception the filters match.
  const [selected, setSelected] = useState(new Set());
  useEffect(() => { setSelected(new Set()); }, [route.key]);
  const bulk = can("preparer");
  const selection = bulk && shown ? { selected, setSelected, rows: shown.data } : null;
  return html`
    <${Filters} params=${params} problems=${problems} reconciliations=${reconciliations ? reconciliations.data : []}
      streams=${streams ? streams.data : []} people=${people} />
    ${!invalid && html`<${ExportButton} kind="exceptions" filters=${exportable(path)} label="Export the filtered exceptions" />`}
    <p class="queue-count" id="exc-count" tabindex="-1" role="status" data-testid="exception-count" data-for=${route.key}>${invalid ? "Correct the filters to see exceptions." : (loading ? "Loading exceptions…" : announced)}</p>
    <p class="visually-hidden" role="status" data-testid="queue-said">${said}</p>
    <${Problem} error=${error} what="load the exceptions" />
    ${pastEnd && html`<p>This page is past the last exception. <a href=${queueHash(params, { offset: undefined })}>Go to the first page</a></p>`}
    ${shown && !pastEnd && (shown.data.length === 0
      ? html`<p>No exception matches these filters.</p>`
      : html`
        <table class="exception-queue">
          <caption class="visually-hidden">Exceptions ${from} to ${to} of ${count(shown.total)}</caption>
          <thead><tr>
            ${selection && html`<th scope="col"><${Selector} selection=${selection} /></th>`}
            <th scope="col">Exception</th><th scope="col">Status</th><th scope="col">Assignees</th>
            <th scope="col" class="number">Records</th><th scope="col" class="number">Net amount</th>
            <th scope="col" class="number">Credits / debits</th><th scope="col">Oldest record</th><th scope="col">Opened</th>
            <th scope="col">Severity and due</th>
          </tr></thead>
          <tbody>${shown.data.map((e) => html`<${Row} key=${e.id} exception=${e} people=${people} back=${back} session=${session} onSaid=${say}
            selection=${selection} />`)}</tbody>
        </table>`)}
    ${(shown || (loading && !invalid && data)) && !pastEnd && html`
      <nav class="pager" aria-label="Exception pages">
        <button type="button" onClick=${() => go(Math.max(0, offset - PAGE_SIZE))} disabled=${!shown || offset === 0}>Previous</button>
        <span>${shown ? `${from}–${to} of ${count(shown.total)} · page ${Math.floor(offset / PAGE_SIZE) + 1} of ${pages}` : "Loading…"}</span>
        <button type="button" onClick=${() => go(offset + PAGE_SIZE)} disabled=${!shown || !shown.has_more}>Next</button>
      </nav>`}
    ${bulk && !invalid && html`<${BulkPanel} params=${params} path=${path} shown=${shown} selected=${selected}
      people=${people} session=${session} onEnded=${() => { setSelected(new Set()); setTick((n) => n + 1); }} />`}`;
}

export function ExceptionsPage({ route, session }) {
  if (route.path[0]) return html`<${ExceptionDetail} id=${route.path[0]} route=${route} session=${session} />`;
  return html`<${Queue} route=${route} session=${session} />`;
}
