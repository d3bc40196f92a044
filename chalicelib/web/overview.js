// Overview (#/overview): the environment at a glance from one request (GET /v1/overview): each
// reconciliation's last run, match rate (and the rate a day ago), open exceptions with what they amount
// to, what changed since yesterday; the imports in progress. Read again every 10 s while on the page.
import { html, percent } from "./api.js";
import { ActiveExceptionsLink } from "./exceptions.js";
import { duration, Money, plural, Problem, useApi, usePoll, When } from "./ui.js";

const REFRESH_MS = 10_000;

function rate(run) {
  return run && run.total_records ? percent(run.matched_records, run.total_records) : "—";
}

function OpenExceptions({ row }) {
  const open = row.open_exceptions;
  if (!open.count) return html`<span>none</span>`;
  return html`
    <${ActiveExceptionsLink} reconciliationId=${row.id} open=${open.count - open.investigating} investigating=${open.investigating} />
    ${open.amounts.map((a) => html`<br /><${Money} amount=${a.amount} places=${a.decimal_places} currency=${a.currency} />`)}
    ${open.mixed_currency ? html`<br /><span class="muted">${open.mixed_currency} in no single currency (several, or not recorded yet)</span>` : null}`;
}

function Changes({ row }) {
  const c = row.since;
  const parts = [
    c.runs_completed && plural(c.runs_completed, "run completed", "runs completed"),
    c.runs_failed && plural(c.runs_failed, "run failed", "runs failed"),
    c.exceptions_opened && plural(c.exceptions_opened, "exception opened", "exceptions opened"),
    c.exceptions_closed && plural(c.exceptions_closed, "exception closed", "exceptions closed"),
  ].filter(Boolean);
  return html`<span>${parts.length ? parts.join(", ") : "nothing"}</span>`;
}

function Reconciliations({ rows, more }) {
  if (!rows.length) return html`<p>No reconciliations yet.</p>`;
  return html`
    <table class="overview">
      <caption>Reconciliations${more ? " (the newest 100)" : ""}</caption>
      <thead><tr>
        <th scope="col">Name</th><th scope="col">Last run</th><th scope="col">When</th><th scope="col">Took</th>
        <th scope="col" class="number">Match rate</th><th scope="col" class="number">A day ago</th>
        <th scope="col">Open exceptions</th><th scope="col">Since yesterday</th>
      </tr></thead>
      <tbody>
        ${rows.map((r) => {
          const run = r.last_run;
          return html`<tr key=${r.id}>
            <td><a href=${`#/reconciliations/${r.id}`}>${r.name}</a></td>
            <td>${run ? run.status : "never run"}</td>
            <td>${run ? html`<${When} iso=${run.completed_at || run.started_at || run.created_at} />` : "—"}</td>
            <td>${run ? duration(run) : "—"}</td>
            <td class="number">${rate(run)}</td>
            <td class="number">${rate(r.run_before)}</td>
            <td><${OpenExceptions} row=${r} /></td>
            <td><${Changes} row=${r} /></td>
          </tr>`;
        })}
      </tbody>
    </table>`;
}

function stage(job) {
  if (job.status === "pending") return "waiting for its file";
  if (!job.total_items) return "reading the file";
  return `${job.processed_items.toLocaleString()} of ${job.total_items.toLocaleString()} rows`;
}

function ImportsInProgress({ jobs }) {
  return html`
    <section aria-labelledby="imports-in-progress">
      <h2 id="imports-in-progress">Imports in progress</h2>
      ${!jobs.length ? html`<p>None.</p>` : html`
        <ul class="imports-in-progress">
          ${jobs.map((job) => {
            const label = `${job.filename || `Import ${job.id}`}${job.data_stream_key ? ` into ${job.data_stream_key}` : ""}`;
            return html`<li key=${job.id}>
              <a href=${`#/imports/${job.id}`}>${label}</a>: ${stage(job)}
              <progress aria-label=${`${label}: rows done`} max=${job.total_items || undefined}
                value=${job.total_items ? job.processed_items : undefined}></progress>
            </li>`;
          })}
        </ul>`}
    </section>`;
}

export function OverviewPage() {
  const { loading, error, data, refresh } = useApi("overview");
  // A hidden tab is not read (its turn passes); the next turn after it shows again reads.
  usePoll((signal) => (document.hidden ? undefined : refresh(signal)), REFRESH_MS, Boolean(data));
  if (error && !data) return html`<${Problem} error=${error} what="load the overview" />`;
  if (loading && !data) return html`<p>Loading the overview…</p>`;
  return html`
    <p class="muted">Since yesterday means since <${When} iso=${data.since} />.</p>
    <${Reconciliations} rows=${data.reconciliations} more=${data.more_reconciliations} />
    <${ImportsInProgress} jobs=${data.imports_in_progress} />`;
}
