// Reconciliations (#/reconciliations, #/reconciliations/<id>): the list; one reconciliation's rules
// (reconciliations-rules.js), a run started and watched live, its runs history, and its approval
// policy and period closes (reconciliations-signoff.js), its service levels, aging and routing rules
// (reconciliations-service-levels.js).
import { useEffect, useRef, useState } from "preact/hooks";
import { api, can, html, percent, query } from "./api.js";
import { duration, Pager, Problem, Status, useApi, usePaging, usePoll, When } from "./ui.js";
import { RulesSection } from "./reconciliations-rules.js";
import { SignOffSections } from "./reconciliations-signoff.js";
import { ServiceLevelSections } from "./reconciliations-service-levels.js";

const POLL_MS = 1000; // a run is read at most once a second while it is watched
const ENDED = ["completed", "failed", "cancelled"];

export function ReconciliationsPage({ route }) {
  const id = route.path[0];
  return id ? html`<${ReconciliationDetail} id=${id} key=${id} />` : html`<${ReconciliationList} />`;
}

function streamNames(streams) {
  return (streams || []).map((s) => s.name || s.key).join(", ") || "—";
}

function ReconciliationList() {
  const paging = usePaging();
  const { loading, error, data } = useApi(`reconciliations${query({ limit: 25, cursor: paging.cursor })}`);
  if (error) return html`<${Problem} error=${error} what="load the reconciliations" />`;
  if (loading && !data) return html`<p>Loading reconciliations…</p>`;
  if (!data.data.length) return html`<p>No reconciliations yet.</p>`;
  return html`
    <table class="reconciliations">
      <caption class="visually-hidden">Reconciliations</caption>
      <thead><tr><th scope="col">Name</th><th scope="col">Run type</th><th scope="col">Side A</th>
        <th scope="col">Side B</th><th scope="col">Last run</th><th scope="col" class="number">Match rate</th></tr></thead>
      <tbody>
        ${data.data.map((r) => {
          const run = r.current_run || r.last_run;
          return html`<tr key=${r.id}>
            <td><a href=${`#/reconciliations/${r.id}`}>${r.name}</a></td>
            <td>${r.run_type}</td>
            <td>${streamNames(r.side_a_streams)}</td>
            <td>${streamNames(r.side_b_streams)}</td>
            <td>${run ? html`${run.status}, <${When} iso=${run.completed_at || run.started_at || run.created_at} />` : "never run"}</td>
            <td class="number">${run ? percent(run.matched_records, run.total_records) : "—"}</td>
          </tr>`;
        })}
      </tbody>
    </table>
    <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Reconciliations" />`;
}

function ReconciliationDetail({ id }) {
  const { error, data, reload } = useApi(`reconciliations/${encodeURIComponent(id)}`);
  const [historyTick, setHistoryTick] = useState(0);
  if (error) return html`<p><a href="#/reconciliations">All reconciliations</a></p><${Problem} error=${error} what="load the reconciliation" />`;
  if (!data) return html`<p>Loading the reconciliation…</p>`;
  const ended = () => { setHistoryTick((n) => n + 1); reload(); };
  return html`
    <p><a href="#/reconciliations">All reconciliations</a></p>
    <h2>${data.name}</h2>
    <dl class="facts">
      <dt>Run type</dt><dd>${data.run_type}</dd>
      <dt>Side A</dt><dd>${streamNames(data.side_a_streams)}</dd>
      <dt>Side B</dt><dd>${streamNames(data.side_b_streams)}</dd>
      <dt>Created</dt><dd><${When} iso=${data.created_at} /></dd>
    </dl>
    <${RulesSection} reconciliation=${data} />
    <${RunSection} reconciliation=${data} onEnded=${ended} />
    <${RunHistory} reconciliationId=${data.id} tick=${historyTick} />
    <${SignOffSections} reconciliation=${data} />
    <${ServiceLevelSections} reconciliation=${data} />
    <p><a href=${`#/matches?reconciliation_id=${data.id}&status=proposed`}>Proposed matches of this reconciliation</a></p>`;
}

// Start a run (preparers) and watch the current one until it ends; `onEnded` reloads the history
// (at the start too, so the new run is listed while it goes on).
function RunSection({ reconciliation, onEnded }) {
  const [run, setRun] = useState(reconciliation.current_run || null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const allowed = can("preparer");

  const watching = run && !ENDED.includes(run.status);
  async function start() {
    if (busy || watching) return; // one run at a time (the API refuses a second one anyway)
    setBusy(true);
    setError(null);
    try {
      setRun(await api(`reconciliations/${reconciliation.id}/runs`, { method: "POST" }));
      onEnded(); // the history shows the new run at once
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  }

  return html`
    <section aria-labelledby="run-title">
      <h2 id="run-title">Run</h2>
      ${allowed && html`<button type="button" onClick=${start}
        aria-disabled=${watching || busy ? "true" : undefined}>Start run</button>`}
      <${Problem} error=${error} what="start a run" />
      ${run && html`<${RunProgress} key=${run.id} reconciliationId=${reconciliation.id} first=${run}
        onEnded=${(ended) => { setRun(ended); onEnded(); }} allowed=${allowed} />`}
    </section>`;
}

// One run read once a second (the next read is asked for a second after the previous answer) until
// it is completed, failed or cancelled: a progress bar with the counts beside it, and a polite live
// region that speaks when the run's status changes (not at each count).
function RunProgress({ reconciliationId, first, onEnded, allowed }) {
  const [run, setRun] = useState(first);
  const [error, setError] = useState(null);
  const [cancelError, setCancelError] = useState(null);
  const [cancelling, setCancelling] = useState(false);
  const endedRef = useRef(onEnded);
  endedRef.current = onEnded;

  usePoll(async (signal) => {
    try {
      const fresh = await api(`reconciliations/${reconciliationId}/runs/${first.id}`, { signal });
      setRun(fresh);
      setError(null);
      if (ENDED.includes(fresh.status)) endedRef.current(fresh);
    } catch (failure) {
      if (failure.name !== "AbortError") setError(failure); // tried again: the run goes on either way
    }
  }, POLL_MS, !ENDED.includes(run.status));

  async function cancel() {
    if (cancelling) return;
    setCancelling(true);
    setCancelError(null);
    try {
      setRun(await api(`reconciliations/${reconciliationId}/runs/${run.id}/cancel`, { method: "POST" }));
    } catch (failure) {
      setCancelError(failure);
    } finally {
      setCancelling(false);
    }
  }

  const ended = ENDED.includes(run.status);
  const value = Math.round(Number(run.progress || 0));
  let summary = `Run ${run.id} ${run.status}: ${run.processed_records} of ${run.total_records} records processed, `
    + `${run.matched_records} matched`;
  if (ended) summary += ` (${percent(run.matched_records, run.total_records)})`;
  else summary += `, ${value}% done`;
  if (run.error_message) summary += `. ${run.error_message}`;
  const said = ended ? `Run ${run.id} ${run.status}: ${run.matched_records} of ${run.total_records} records matched.`
    : `Run ${run.id} ${run.status}.`;
  return html`
    <div class="run-progress" data-run-id=${run.id} data-status=${run.status}>
      <label for=${`run-${run.id}-progress`}>Run ${run.id} progress</label>
      <progress id=${`run-${run.id}-progress`} max="100" value=${ended && run.status === "completed" ? 100 : value}
        aria-describedby=${`run-${run.id}-counts`}>${value}%</progress>
      <p id=${`run-${run.id}-counts`} class="run-counts">${summary}</p>
      <p class="visually-hidden" role="status">${said}</p>
      ${!ended && allowed && !run.cancellation_requested_at
        && html`<button type="button" class="secondary" onClick=${cancel}
          aria-disabled=${cancelling ? "true" : undefined}>Cancel run</button>`}
      ${!ended && run.cancellation_requested_at && html`<p>Cancellation asked for; the run stops at its next step.</p>`}
      ${error && html`<p class="error">Could not read the run (trying again): ${error.message}</p>`}
      <${Problem} error=${cancelError} what="cancel the run" />
    </div>`;
}

function RunHistory({ reconciliationId, tick }) {
  const paging = usePaging();
  const path = `reconciliations/${reconciliationId}/runs${query({ limit: 10, cursor: paging.cursor })}`;
  const { loading, error, data, reload } = useApi(path);
  useEffect(() => { if (tick) reload(); }, [tick]);
  return html`
    <section aria-labelledby="runs-title">
      <h2 id="runs-title">Runs history</h2>
      <${Problem} error=${error} what="load the runs" />
      ${loading && !data && html`<p>Loading runs…</p>`}
      ${data && !data.data.length && html`<p>No runs yet.</p>`}
      ${data && data.data.length > 0 && html`
        <table class="runs">
          <caption class="visually-hidden">Runs, newest first</caption>
          <thead><tr><th scope="col">Run</th><th scope="col">Status</th><th scope="col">Trigger</th>
            <th scope="col">Started</th><th scope="col">Took</th><th scope="col" class="number">Records</th>
            <th scope="col" class="number">Matched</th><th scope="col" class="number">Match rate</th></tr></thead>
          <tbody>
            ${data.data.map((run) => html`<tr key=${run.id} data-run-id=${run.id}>
              <td>${run.id}</td><td>${run.status}</td><td>${run.trigger}</td>
              <td><${When} iso=${run.started_at || run.created_at} /></td><td>${run.completed_at ? duration(run) : "—"}</td>
              <td class="number">${run.total_records}</td><td class="number">${run.matched_records}</td>
              <td class="number">${percent(run.matched_records, run.total_records)}</td>
            </tr>`)}
          </tbody>
        </table>
        <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Runs" />`}
      <${Status} text=${loading && data ? "Loading runs…" : ""} />
    </section>`;
}
