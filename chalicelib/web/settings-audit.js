// Settings › Audit trail: the environment's audit entries (newest first, paged), filtered by actor,
// resource and time as GET /v1/audit_events allows (the filters live in the address:
// #/settings/audit?actor=user:3), and its verification: GET /v1/audit_events/verify walked to the
// chain's end (it answers in bounded steps) and its outcome shown.
import { useEffect, useState } from "preact/hooks";
import { api, can, html, query } from "./api.js";
import { ExportButton, exportFilters } from "./export.js";
import { FieldError, go, invalid, Outcome, Pager, placeErrors, Problem, useAction, useAll, useApi, useMounted, usePaging, When } from "./ui.js";

const PAGE_SIZE = 25;
const FILTERS = ["actor", "resource_type", "resource_id", "from", "to"];
const MAX_VERIFY_STEPS = 1000; // a chain of a million entries at the service's step; past it, say so

// A datetime-local value (the person's time) as an ISO instant; and back, for the form.
const toIso = (local) => (local ? new Date(local).toISOString() : "");
function toLocal(iso) {
  if (!iso) return "";
  const when = new Date(iso);
  if (Number.isNaN(when.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${when.getFullYear()}-${pad(when.getMonth() + 1)}-${pad(when.getDate())}T${pad(when.getHours())}:${pad(when.getMinutes())}`;
}

function filtersOf(params) {
  return Object.fromEntries(FILTERS.map((f) => [f, params.get(f) || ""]));
}

const filter = (filters) => go("#/settings/audit", filters);

function Filters({ filters, errors }) {
  function submit(event) {
    event.preventDefault();
    const data = new FormData(event.currentTarget);
    filter({ actor: data.get("actor").trim(), resource_type: data.get("resource_type").trim(),
      resource_id: data.get("resource_id").trim(), from: toIso(data.get("from")), to: toIso(data.get("to")) });
  }
  const field = (name, label, props = {}) => html`
    <div>
      <label for=${`audit-${name}`}>${label}</label>
      <input id=${`audit-${name}`} name=${name} autocomplete="off" ...${props} ...${invalid(`audit-${name}`, errors[name])} />
      <${FieldError} id=${`audit-${name}`} message=${errors[name]} />
    </div>`;
  return html`
    <form class="settings-form audit-filters" onSubmit=${submit} novalidate aria-label="Filter the audit trail"
          key=${JSON.stringify(filters)}>
      <div class="fields">
        ${field("actor", "Actor", { defaultValue: filters.actor, placeholder: "user:3, api_key:1, system:sweeper" })}
        ${field("resource_type", "Resource type", { defaultValue: filters.resource_type, placeholder: "user" })}
        ${field("resource_id", "Resource id", { defaultValue: filters.resource_id })}
        ${field("from", "From", { type: "datetime-local", defaultValue: toLocal(filters.from) })}
        ${field("to", "To", { type: "datetime-local", defaultValue: toLocal(filters.to) })}
      </div>
      <div class="toolbar">
        <button type="submit">Filter</button>
        <button type="button" class="secondary" onClick=${() => filter({})}>Clear filters</button>
      </div>
    </form>`;
}

function Verify() {
  const action = useAction();
  const [report, setReport] = useState(null);
  const mounted = useMounted();
  async function verify() {
    if (action.busy) return;
    setReport(null);
    const done = await action.run(async () => {
      let fromSeq = 1;
      let checked = 0;
      for (let step = 0; step < MAX_VERIFY_STEPS; step += 1) {
        if (!mounted.current) throw new Error("the page was left"); // the walk stops with the page
        const answer = await api(`audit_events/verify${query({ from_seq: fromSeq })}`);
        checked += answer.checked;
        if (answer.complete || !answer.intact || answer.next_from_seq === null) return { ...answer, checked };
        fromSeq = answer.next_from_seq;
      }
      return { intact: true, complete: false, checked, last_checked_seq: fromSeq - 1 };
    }, (r) => (r.intact ? (r.complete ? "The audit trail is intact." : "Checked so far without a break.")
      : "The audit trail is broken."));
    if (done) setReport(done);
  }
  return html`
    <section class="audit-verify" aria-labelledby="verify-title">
      <h3 id="verify-title">Verification</h3>
      <p>Walks the chain of hashes from the first entry to the last, and reports the first break.</p>
      <button type="button" aria-disabled=${action.busy ? "true" : undefined} onClick=${verify}>
        ${action.busy ? "Verifying…" : "Verify the audit trail"}</button>
      <${Outcome} action=${action} />
      ${report && (report.intact
        ? html`<p class="verdict intact" data-testid="audit-verdict">
            ${report.complete ? "Intact" : "No break so far"}: ${report.checked} entries checked, ${""
            }up to entry ${report.last_checked_seq}${report.head_seq !== undefined ? ` of ${report.head_seq}` : ""}.
            ${report.head_hash && html`<br />Head hash <code class="hash">${report.head_hash}</code>`}</p>`
        : html`<p class="verdict broken" data-testid="audit-verdict">
            Broken at entry ${report.first_break.seq} (${report.first_break.reason}): ${report.first_break.message}.
            ${report.checked} entries before it checked intact.</p>`)}
    </section>`;
}

// The summary's fields but the request id (on hover: it ties the entry to the service's logs).
function Summary({ summary }) {
  const { request_id: requestId, ...rest } = summary || {};
  const entries = Object.entries(rest);
  const title = requestId ? `request ${requestId}` : undefined;
  if (!entries.length) return html`<span title=${title}>—</span>`;
  return html`<code class="summary" title=${title}>${entries.map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join("; ")}</code>`;
}

// "user:3" as the person's name, when they are among the users read.
function actorName(actor, users) {
  const id = /^user:(\d+)$/.exec(actor)?.[1];
  const user = id && users.find((u) => String(u.id) === id);
  return user ? `${user.name || user.email} (${actor})` : actor;
}

export function AuditSection({ route }) {
  const filters = filtersOf(route.params);
  const filterKey = JSON.stringify(filters);
  const paging = usePaging();
  const [state, setState] = useState({ loading: true });
  const [errors, setErrors] = useState({});
  useEffect(() => { paging.reset(); }, [filterKey]);
  useEffect(() => {
    const abort = new AbortController();
    setState((before) => ({ ...before, loading: true, error: undefined }));
    api(`audit_events${query({ ...filters, limit: PAGE_SIZE, cursor: paging.cursor })}`, { signal: abort.signal })
      .then((data) => { setErrors({}); setState({ loading: false, data }); })
      .catch((error) => {
        if (error.name === "AbortError") return;
        // A filter the service refused (422) is told beside its field.
        const { errors: placed, elsewhere } = placeErrors(error, FILTERS);
        setErrors(placed);
        setState({ loading: false, error: Object.keys(placed).length && !elsewhere.length ? undefined : error });
      });
    return () => abort.abort();
  }, [filterKey, paging.cursor]);
  const { data, error, loading } = state;
  const people = useAll("users"); // names for user:<id>, of every page of users; the id alone for one that is gone
  const link = (actor) => html`<a href=${`#/settings/audit${query({ ...filters, actor })}`}
      title=${`Only what ${actor} did`}>${actorName(actor, people.data?.data || [])}</a>`;
  return html`
    <${Verify} />
    <h3>Entries</h3>
    <${Filters} filters=${filters} errors=${errors} />
    ${can("admin") && !Object.keys(errors).length && html`<${ExportButton} kind="audit_events"
      filters=${exportFilters(`audit_events${query(filters)}`)} label="Export the filtered audit trail" />`}
    <${Problem} error=${error} what="load the audit trail" />
    ${loading && !data ? html`<p>Loading the audit trail…</p>` : data && !Object.keys(errors).length && html`
      <table class="settings-table audit-table">
        <caption class="visually-hidden">Audit trail entries, newest first</caption>
        <thead><tr><th scope="col" class="number">Entry</th><th scope="col">When</th><th scope="col">Actor</th>
          <th scope="col">Action</th><th scope="col">Resource</th><th scope="col">Summary</th></tr></thead>
        <tbody>
          ${data.data.map((e) => html`
            <tr key=${e.seq}>
              <td class="number">${e.seq}</td>
              <td><${When} iso=${e.at} /></td>
              <td>${link(e.actor)}</td>
              <td>${e.action}</td>
              <td>${e.resource_type}${e.resource_id ? ` ${e.resource_id}` : ""}</td>
              <td><${Summary} summary=${e.summary} /></td>
            </tr>`)}
        </tbody>
      </table>
      ${!data.data.length && html`<p>No entries match these filters.</p>`}
      <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Audit trail" />`}`;
}
