// Bulk actions (docs/bulk-actions.md): one action on many exceptions or proposed matches, asked with
// POST …/bulk (202, the action) and worked by the service's queue. useBulk() sends it and reads
// GET /v1/bulk_actions/{id} once a second (usePoll: never two reads at once, stopped when the page is
// left) until it is completed or failed, then every page of its per-item results. BulkProgress shows
// the progress, the counts and each item that failed or was skipped, with the service's reason.
import { useRef, useState } from "preact/hooks";
import { api, html, query } from "./api.js";
import { plural, Problem, usePoll } from "./ui.js";

const POLL_MS = 1000;
const ENDED = ["completed", "failed"];
const RESULTS_PAGE = 1000; // the most GET /bulk_actions/{id} answers at once

// Every per-item result of an ended action, following next_cursor (a cursor answered twice is an error).
async function allResults(id, first, signal) {
  const results = [...first.results];
  const seen = new Set();
  let cursor = first.next_cursor;
  while (cursor) {
    if (seen.has(cursor)) throw new Error(`the results of bulk action ${id} answered the same cursor twice`);
    seen.add(cursor);
    const page = await api(`bulk_actions/${id}${query({ limit: RESULTS_PAGE, cursor })}`, { signal });
    results.push(...page.results);
    cursor = page.next_cursor;
  }
  return results;
}

// {action, results, error, busy, running, start(path, body), forget()}: `action` is the latest read of
// the bulk action; `results` all its items' results once it ended (null before); onEnded(action,
// results) is called once when it ends.
export function useBulk(onEnded) {
  const [state, setState] = useState({ action: null, results: null, error: null, busy: false });
  const busyRef = useRef(false);
  const ended = useRef(onEnded);
  ended.current = onEnded;
  const running = state.action !== null && !ENDED.includes(state.action.status);

  async function finish(read, signal) {
    const results = await allResults(read.id, read, signal);
    setState({ action: read, results, error: null, busy: false });
    busyRef.current = false;
    if (ended.current) ended.current(read, results);
  }

  async function start(path, body) {
    if (busyRef.current) return false; // one action at a time: a second press does nothing
    busyRef.current = true;
    setState({ action: null, results: null, error: null, busy: true });
    try {
      const asked = await api(path, { method: "POST", body });
      if (ENDED.includes(asked.status)) { // a filter that selects none ends at once
        await finish(await api(`bulk_actions/${asked.id}${query({ limit: RESULTS_PAGE })}`), undefined);
      } else {
        setState({ action: asked, results: null, error: null, busy: true });
      }
      return true;
    } catch (error) {
      busyRef.current = false;
      setState({ action: null, results: null, error, busy: false });
      return false;
    }
  }

  usePoll(async (signal) => {
    try {
      const read = await api(`bulk_actions/${state.action.id}${query({ limit: RESULTS_PAGE })}`, { signal });
      if (ENDED.includes(read.status)) await finish(read, signal);
      else setState((before) => ({ ...before, action: read, error: null }));
    } catch (error) {
      if (error.name !== "AbortError") setState((before) => ({ ...before, error })); // read again next turn
    }
  }, POLL_MS, running);

  const forget = () => { if (!busyRef.current) setState({ action: null, results: null, error: null, busy: false }); };
  return { ...state, running, start, forget };
}

// An item's words: "succeeded", "skipped: already dismissed", "failed: …".
export const itemWords = (r) => (r.error ? `${r.status}: ${r.error}` : r.status);

// The progress of a bulk action and, once it ended, its counts and every item that did not succeed (with
// the service's reason); `nameOf(id)` names an item ("Exception 12", a link...). `what` is the
// items' noun ("exception", "match"), `verb` the action's words ("assigned", "dismissed").
export function BulkProgress({ bulk, what, many, nameOf, title }) {
  const { action, results, error } = bulk;
  if (!action && !error) return null;
  const noun = (n) => plural(n, what, many);
  const notDone = results ? results.filter((r) => r.status !== "succeeded") : [];
  return html`
    <section class="bulk-progress" aria-labelledby="bulk-progress-title" data-testid="bulk-progress">
      <h2 id="bulk-progress-title">${title}</h2>
      <${Problem} error=${error} what=${action ? "read the bulk action's progress" : "start the bulk action"} />
      ${action && html`
        <div class="progress-line">
          <label for="bulk-progress-bar">Bulk action ${action.id}</label>
          <progress id="bulk-progress-bar" max="100" value=${action.progress ?? 0}>${action.progress ?? 0}%</progress>
          <span>${action.processed_items} of ${noun(action.total_items)}</span>
        </div>
        <p class="status" role="status" data-testid="bulk-status">${results
          ? `${action.status === "failed" ? "Stopped" : "Done"}: ${action.succeeded_items} succeeded, ${action.skipped_items} skipped, ${action.failed_items} failed of ${noun(action.total_items)}.`
          : `Working: ${action.processed_items} of ${noun(action.total_items)} done (${action.status}).`}</p>
        ${action.status === "failed" && action.error && html`<p class="error" role="alert">The bulk action failed: ${action.error}</p>`}
        ${notDone.length > 0 && html`
          <ul class="bulk-results" aria-label="Items not done">
            ${notDone.map((r) => html`<li key=${r.index} class=${r.status === "failed" ? "error" : "muted"}
              data-item-id=${r.id}>${nameOf(r.id)}: ${itemWords(r)}</li>`)}
          </ul>`}`}
    </section>`;
}
