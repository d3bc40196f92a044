// Stories (#/stories, #/stories/<id>, #/stories/<id>?record=<record id>): the chains of
// reconciliations, each drawn as a chain with where it leaks (GET …/summary), and the trace of one
// record through it (GET …/trace), entered by id or picked from a stream of the story.
import { useEffect, useState } from "preact/hooks";
import { api, can, html, query } from "./api.js";
import { ActiveExceptionsLink } from "./exceptions.js";
import { go, Money, Pager, plural, Problem, Status, useApi, usePaging, When } from "./ui.js";

export function StoriesPage({ route }) {
  const [id] = route.path;
  return html`<div class="stories-page">${id ? html`<${Story} id=${id} route=${route} key=${id} />` : html`<${StoryList} />`}</div>`;
}


// Money by currency (MoneyOut[]): each currency's credits and debits, the zero side left out.
function Totals({ totals }) {
  if (!totals || !totals.length) return html`<span class="muted">nothing</span>`;
  return html`<span class="totals">${totals.map((t, i) => html`${i ? "; " : ""}<span>
    ${t.credits || !t.debits ? html`<${Money} amount=${t.credits} places=${t.decimal_places} currency=${t.currency} /> credits` : ""}
    ${t.credits && t.debits ? ", " : ""}
    ${t.debits ? html`<${Money} amount=${t.debits} places=${t.decimal_places} currency=${t.currency} /> debits` : ""}
  </span>`)}</span>`;
}

const countOf = (totals) => (totals || []).reduce((n, t) => n + Number(t.count), 0);

function Figures({ totals }) {
  return html`${plural(countOf(totals), "record")}${countOf(totals) ? html`: <${Totals} totals=${totals} />` : ""}`;
}

function StoryList() {
  const paging = usePaging();
  const { loading, error, data } = useApi(`reconciliation_stories${query({ limit: 50, cursor: paging.cursor })}`);
  if (error) return html`<${Problem} error=${error} what="load the stories" />`;
  if (loading && !data) return html`<p>Loading stories…</p>`;
  if (!data.data.length && paging.page === 1) return html`<p>No stories yet: an admin chains reconciliations into one with <code>POST /v1/reconciliation_stories</code>.</p>`;
  return html`
    <table class="stories">
      <caption class="visually-hidden">Stories</caption>
      <thead><tr><th scope="col">Story</th><th scope="col">Chain</th><th scope="col" class="number">Links</th>
        <th scope="col">Created</th></tr></thead>
      <tbody>
        ${data.data.map((s) => html`<tr key=${s.id}>
          <td><a href=${`#/stories/${s.id}`}>${s.name}</a></td>
          <td>${s.links.map((l) => l.reconciliation_name).join(" → ")}</td>
          <td class="number">${s.links.length}</td>
          <td><${When} iso=${s.created_at} /></td>
        </tr>`)}
      </tbody>
    </table>
    <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Stories" />`;
}

function Story({ id, route }) {
  const story = useApi(`reconciliation_stories/${encodeURIComponent(id)}`);
  const summary = useApi(`reconciliation_stories/${encodeURIComponent(id)}/summary`);
  if (story.error) return html`<p><a href="#/stories">All stories</a></p><${Problem} error=${story.error} what="load the story" />`;
  if (!story.data) return html`<p>Loading the story…</p>`;
  const reload = () => { story.reload(); summary.reload(); };
  return html`
    <p><a href="#/stories">All stories</a></p>
    <h2>${story.data.name}</h2>
    ${can("admin") && html`<${Rename} story=${story.data} onRenamed=${reload} />`}
    <section aria-labelledby="chain-title">
      <h3 id="chain-title">The chain</h3>
      <${Problem} error=${summary.error} what="load where the chain leaks" />
      <${Chain} links=${story.data.links} summary=${summary.data} />
    </section>
    <section aria-labelledby="leaks-title">
      <h3 id="leaks-title">Where it leaks</h3>
      ${summary.data ? html`<${Leaks} summary=${summary.data} />` : !summary.error && html`<p>Loading the figures…</p>`}
    </section>
    <section aria-labelledby="trace-title">
      <h3 id="trace-title">Trace a record</h3>
      <${Trace} story=${story.data} route=${route} />
    </section>`;
}

function Rename({ story, onRenamed }) {
  const [name, setName] = useState(story.name);
  const [status, setStatus] = useState("");
  const [error, setError] = useState(null);
  async function submit(event) {
    event.preventDefault();
    setError(null);
    try {
      const saved = await api(`reconciliation_stories/${story.id}`, { method: "PATCH", body: { name } });
      setStatus(`Renamed to ${saved.name}.`);
      onRenamed();
    } catch (failed) { setError(failed); setStatus(""); }
  }
  return html`
    <form class="toolbar story-rename" onSubmit=${submit}>
      <div><label for="story-name">Story name</label>
        <input id="story-name" value=${name} onInput=${(e) => setName(e.currentTarget.value)} required /></div>
      <button type="submit">Rename</button>
    </form>
    <${Problem} error=${error} what="rename the story" />
    <${Status} text=${status} />`;
}

// The reconciliations in order, each a box, joined by an arrow naming the stream they share.
function Chain({ links, summary }) {
  const figures = new Map((summary?.links || []).map((s) => [s.link.position, s]));
  return html`
    <ol class="chain" aria-label="Reconciliations in order">
      ${links.map((link) => {
        const s = figures.get(link.position);
        const leak = s?.from_previous_link;
        return html`<li class=${`chain-step${leak && leak.count ? " chain-leaks" : ""}`} data-position=${link.position}>
          ${link.position > 1 && html`<div class="chain-join">
            <svg class="chain-arrow" viewBox="0 0 48 16" width="48" height="16" aria-hidden="true" focusable="false">
              <path d="M2 8 H40" /><path d="M34 2 L44 8 L34 14" />
            </svg>
            <span class="chain-via">via ${link.shared_data_stream_name || "a shared stream"}</span>
          </div>`}
          <div class="chain-box">
            <p class="chain-title"><span class="chain-position">Link ${link.position}</span>${" "}<a href=${`#/reconciliations/${link.reconciliation_id}`}>${link.reconciliation_name || `Reconciliation ${link.reconciliation_id}`}</a></p>
            <p class="chain-sides">${link.side_a_streams.map((x) => x.name).join(", ") || "—"}
              <span aria-hidden="true"> ⇄ </span><span class="visually-hidden"> against </span>
              ${link.side_b_streams.map((x) => x.name).join(", ") || "—"}</p>
            ${s && html`<${LinkFigures} figures=${s} />`}
          </div>
        </li>`;
      })}
    </ol>`;
}

function LinkFigures({ figures: s }) {
  const run = s.last_run;
  const leak = s.from_previous_link;
  const exceptions = s.open_exceptions || [];
  return html`
    <dl class="chain-figures">
      <dt>Matched</dt><dd>A: <${Figures} totals=${s.side_a.matched} /><br />B: <${Figures} totals=${s.side_b.matched} /></dd>
      <dt>Still open</dt><dd>A: <${Figures} totals=${s.side_a.unmatched} /><br />B: <${Figures} totals=${s.side_b.unmatched} /></dd>
      <dt>Open exceptions</dt><dd>${exceptions.length ? html`<${ActiveExceptionsLink} reconciliationId=${s.link.reconciliation_id}
        open=${exceptions.filter((e) => e.status === "open").length} investigating=${exceptions.filter((e) => e.status === "investigating").length} />` : "none"}</dd>
      <dt>Last run</dt><dd>${run ? html`${run.status}, <${When} iso=${run.completed_at || run.started_at || run.created_at} />` : "never run"}</dd>
      ${leak && html`<dt>Did not flow on</dt><dd class=${leak.count ? "leak" : ""}>${leak.count
        ? html`<strong>${plural(leak.count, "record")}</strong> of ${leak.data_stream.name}: <${Totals} totals=${leak.totals} />`
        : "nothing: all that passed the previous link passed here"}</dd>`}
    </dl>
    <p class="muted chain-when">${s.computed_at ? html`Figures of <${When} iso=${s.computed_at} />` : "No figures until the reconciliation first runs"}${s.refresh_pending ? "; matching changed since, they catch up within a minute" : ""}.</p>`;
}

function Leaks({ summary }) {
  const continuations = summary.links.filter((s) => s.from_previous_link);
  if (!continuations.length) return html`<p>This story has one link: nothing flows from one reconciliation to another.</p>`;
  const leaking = continuations.filter((s) => s.from_previous_link.count);
  return html`
    <p>${leaking.length ? `Records leak at ${plural(leaking.length, "join")} of ${continuations.length}: matched in one link, still open in the next.` : "Nothing leaks: every record that passed a link passed the next."}</p>
    <table class="leaks">
      <caption class="visually-hidden">Records matched in the previous link but still open in this one</caption>
      <thead><tr><th scope="col">Link</th><th scope="col">Shared stream</th><th scope="col" class="number">Records</th>
        <th scope="col">Money that did not flow on</th><th scope="col">Oldest</th></tr></thead>
      <tbody>
        ${continuations.map((s) => {
          const leak = s.from_previous_link;
          return html`<tr key=${s.link.position} class=${leak.count ? "leak-row" : ""}>
            <th scope="row">${s.link.position}. ${s.link.reconciliation_name}</th>
            <td>${leak.data_stream.name}</td>
            <td class="number">${leak.count}</td>
            <td><${Totals} totals=${leak.totals} /></td>
            <td>${leak.oldest_date || "—"}</td>
          </tr>`;
        })}
      </tbody>
    </table>`;
}

const traceOf = (storyId, recordId) => go(`#/stories/${storyId}`, { record: recordId });

function Trace({ story, route }) {
  const recordId = route.params.get("record") || "";
  const [typed, setTyped] = useState(recordId);
  useEffect(() => setTyped(recordId), [recordId]);
  const valid = /^[1-9]\d{0,17}$/.test(recordId);
  const trace = useApi(valid ? `reconciliation_stories/${story.id}/trace${query({ record_id: recordId })}` : null);
  function submit(event) {
    event.preventDefault();
    traceOf(story.id, typed.trim());
  }
  return html`
    <form class="toolbar" onSubmit=${submit}>
      <div><label for="trace-record">Record id</label>
        <input id="trace-record" inputmode="numeric" value=${typed} onInput=${(e) => setTyped(e.currentTarget.value)}
               aria-describedby="trace-help" /></div>
      <button type="submit">Trace</button>
    </form>
    <p id="trace-help" class="muted">Enter a record's id, or pick one from a stream of the story below.</p>
    <${Picker} story=${story} />
    ${recordId && !valid && html`<p class="error" role="alert">A record id is a positive whole number.</p>`}
    ${valid && html`<div aria-busy=${trace.loading ? "true" : "false"}>
      <p class="status" role="status">${traceSaid(trace, recordId)}</p>
      <${Problem} error=${trace.error} what=${`trace record ${recordId}`} />
      ${trace.data && !trace.loading && !trace.error && html`<${TraceResult} trace=${trace.data} story=${story} />`}
    </div>`}`;
}

// The one line the live region says of a trace (the tree itself is read at the person's pace): the
// previous trace is not shown while the next one loads.
function traceSaid(trace, recordId) {
  if (trace.loading) return `Tracing record ${recordId}…`;
  if (!trace.data || trace.error) return "";
  const breaks = trace.data.breaks.length;
  return `Record ${recordId} traced: ${breaks ? `${plural(breaks, "break")} on the way` : "no break"}.`;
}

// A stream of the story's reconciliations, and its newest records (or only its open ones) to pick from.
function Picker({ story }) {
  const [streams, setStreams] = useState(null);
  const [error, setError] = useState(null);
  const [key, setKey] = useState("");
  const [open, setOpen] = useState(false);
  const [records, setRecords] = useState(null);

  async function loadStreams() {
    if (streams) return;
    try {
      const recs = await Promise.all([...new Set(story.links.map((l) => l.reconciliation_id))]
        .map((r) => api(`reconciliations/${r}`)));
      const found = new Map();
      recs.forEach((r) => [...r.side_a_streams, ...r.side_b_streams].forEach((s) => found.set(s.key, s.name)));
      setStreams([...found].map(([k, name]) => ({ key: k, name })));
    } catch (failed) { setError(failed); }
  }

  useEffect(() => {
    if (!key) { setRecords(null); return undefined; }
    const abort = new AbortController();
    setRecords(null);
    api(`records${query({ data_stream_key: key, status: open ? "unreconciled" : "", limit: 20 })}`, { signal: abort.signal })
      .then((answer) => setRecords(answer.data), (failed) => { if (failed.name !== "AbortError") setError(failed); });
    return () => abort.abort();
  }, [key, open]);

  return html`
    <details class="picker" onToggle=${(e) => e.currentTarget.open && loadStreams()}>
      <summary>Pick a record</summary>
      <${Problem} error=${error} what="list the records" />
      ${streams === null ? !error && html`<p>Loading the story's streams…</p>` : html`
        <div class="toolbar">
          <div><label for="pick-stream">Stream</label>
            <select id="pick-stream" value=${key} onChange=${(e) => setKey(e.currentTarget.value)}>
              <option value="">Choose a stream</option>
              ${streams.map((s) => html`<option value=${s.key}>${s.name}</option>`)}
            </select></div>
          <div class="check"><input id="pick-open" type="checkbox" checked=${open} onChange=${(e) => setOpen(e.currentTarget.checked)} />
            <label for="pick-open">Only records not reconciled</label></div>
        </div>
        ${key && records === null && html`<p>Loading records…</p>`}
        ${records && !records.length && html`<p>No records there.</p>`}
        ${records && records.length > 0 && html`<${RecordTable} records=${records} story=${story} caption="Records to pick from" />`}`}
    </details>`;
}

function RecordTable({ records, story, caption }) {
  return html`
    <table class="records">
      <caption class="visually-hidden">${caption}</caption>
      <thead><tr><th scope="col">Record</th><th scope="col">External id</th><th scope="col">Stream</th>
        <th scope="col">Date</th><th scope="col" class="number">Amount</th><th scope="col">Trace</th></tr></thead>
      <tbody>
        ${records.map((r) => html`<tr key=${r.id}>
          <td>${r.id}</td><td>${r.external_id || "—"}</td><td>${r.data_stream_key}</td><td>${r.date}</td>
          <td class="number"><${Money} amount=${r.amount} places=${r.decimal_places} currency=${r.currency} /> ${r.direction}</td>
          <td><button type="button" class="link" onClick=${() => traceOf(story.id, String(r.id))}
                      aria-label=${`Trace record ${r.id}`}>Trace</button></td>
        </tr>`)}
      </tbody>
    </table>`;
}

const BREAKS = {
  unmatched: "open in this reconciliation: the trace stops here",
  exception: "held by an exception: the trace stops here",
  proposed: "a proposed match nobody confirmed yet: the trace goes on through it",
};
const DIRECTIONS = { start: "where the record starts", upstream: "upstream", downstream: "downstream" };

function TraceResult({ trace, story }) {
  const r = trace.record;
  return html`
    <div class="trace" data-record=${r.id}>
      <p>Record <strong>${r.id}</strong>${r.external_id ? ` (${r.external_id})` : ""} of ${r.data_stream_key},${" "}<${Money} amount=${r.amount} places=${r.decimal_places} currency=${r.currency} /> ${r.direction} on ${r.date}.</p>
      ${trace.truncated && html`<p class="banner">The trace reached its limit of 200 steps: the rest is summarised, not followed.</p>`}
      <${Breaks} breaks=${trace.breaks} />
      <ol class="trace-hops" aria-label="Trace, step by step">
        ${trace.hops.map((hop, i) => html`<${Hop} key=${i} hop=${hop} story=${story} />`)}
      </ol>
    </div>`;
}

function Breaks({ breaks }) {
  if (!breaks.length) return html`<p class="trace-clean">No break: every step of this record's path is matched.</p>`;
  return html`
    <div class="trace-breaks">
      <p><strong>${plural(breaks.length, "break")}</strong> on the way:</p>
      <ul>${breaks.map((b, i) => html`<li key=${i}>Link ${b.link_position}: ${b.reason}${b.exception_id ? html` (<a href=${`#/exceptions/${b.exception_id}`}>exception ${b.exception_id}</a>)` : ""}${b.match_id ? ` (match ${b.match_id})` : ""}, ${plural(b.record_ids.length, "record")} ${b.record_ids.join(", ")}</li>`)}</ul>
    </div>`;
}

function Hop({ hop, story }) {
  const brk = hop.break;
  return html`
    <li class=${`hop${brk ? ` hop-${brk.reason}` : ""}`} data-position=${hop.link.position}>
      <p class="hop-head">
        <span class="chain-position">Link ${hop.link.position}</span> ${hop.link.reconciliation_name}
        <span class="muted"> · ${DIRECTIONS[hop.direction]}${hop.via_data_stream ? ` via ${hop.via_data_stream.name}` : ""}</span>
      </p>
      <p class="hop-what">
        ${hop.match && html`Match ${hop.match.id}, ${hop.match.status}${hop.match.reconciliation_rule_id === null ? " by hand" : ""}. `}
        ${brk && html`<strong class="break">Break: ${brk.reason}</strong> — ${BREAKS[brk.reason]}${brk.exception_id ? html` (<a href=${`#/exceptions/${brk.exception_id}`}>exception ${brk.exception_id}</a>)` : ""}. `}
        ${plural(hop.records.count, "record")}: <${Totals} totals=${hop.records.totals} />${hop.records.count > hop.records.data.length ? `; the first ${hop.records.data.length} shown` : ""}.
      </p>
      <${RecordTable} records=${hop.records.data} story=${story}
        caption=${`Records of link ${hop.link.position}, ${hop.match ? `match ${hop.match.id}` : "break"}`} />
      ${hop.next_omitted && html`<p class="muted">${plural(hop.next_omitted.hops, "more step")} left out (${plural(hop.next_omitted.records, "record")}: <${Totals} totals=${hop.next_omitted.totals} />; ${plural(hop.next_omitted.breaks.unmatched + hop.next_omitted.breaks.exception + hop.next_omitted.breaks.proposed, "break")}).</p>`}
      ${hop.next.length > 0 && html`<ol class="trace-hops">${hop.next.map((n, i) => html`<${Hop} key=${i} hop=${n} story=${story} />`)}</ol>`}
    </li>`;
}
