// Matches (#/matches?reconciliation_id=<id>&status=proposed, #/matches/<id>): the matches of a
// reconciliation, proposed ones to confirm or reject (approvers), one at a time or the selected ones (one
// bulk action);
// a match's records with their amounts and dates.
import { useEffect, useRef, useState } from "preact/hooks";
import { api, can, html, query } from "./api.js";
import { useBulk } from "./bulk.js";
import { ExportButton, exportFilters } from "./export.js";
import { Conversion } from "./near-misses.js";
import { MatchShares, PartPaid } from "./partial-payments.js";
import { Confirm, go, Money, Pager, plural, Problem, Status, useAll, useApi, useMounted, usePaging, When } from "./ui.js";

export function MatchesPage({ route }) {
  const id = route.path[0];
  return id ? html`<${MatchDetail} id=${id} key=${id} />` : html`<${MatchList} params=${route.params} />`;
}

// The filters live in the address, so a filtered list can be linked to and survives a reload.
const filter = (params) => go("#/matches", params);

// Confirm (POST …/confirm) or reject (DELETE: the match goes, its records are open again) one match.
async function decide(matchId, action) {
  if (action === "confirm") return api(`reconciliation_matches/${matchId}/confirm`, { method: "POST" });
  return api(`reconciliation_matches/${matchId}`, { method: "DELETE" });
}
const DONE = { confirm: "confirmed", reject: "rejected" };

function MatchList({ params }) {
  const reconciliations = useAll("reconciliations");
  const chosen = params.get("reconciliation_id") || (reconciliations.data?.data[0]?.id ?? "");
  const status = params.get("status") || "proposed"; // "all" shows both statuses
  const paging = usePaging();
  const [selected, setSelected] = useState(new Set());
  const [results, setResults] = useState(null); // [{id, action, ok, message}] of the last decision(s)
  const [busy, setBusy] = useState(false);
  const busyRef = useRef(false); // read at the press: a second press before the re-render does nothing
  const mounted = useMounted();
  const approver = can("approver");
  const path = chosen ? `reconciliation_matches${query({ reconciliation_id: chosen, status: status === "all" ? "" : status, limit: 25, cursor: paging.cursor })}` : null;
  const { loading, error, data, reload } = useApi(path);

  useEffect(() => { paging.reset(); setSelected(new Set()); }, [chosen, status]);
  useEffect(() => { setSelected(new Set()); }, [paging.cursor]);

  // One match: its own request. Several: one bulk action (POST /v1/reconciliation_matches/bulk, worked
  // by the service's queue, docs/bulk-actions.md), read once a second until it ends; each match's outcome
  // is listed in the order shown, and a failure does not stop the rest.
  const bulk = useBulk((action, items) => {
    const verb = action.action;
    setResults(items.map((r) => ({ id: r.id, action: verb, ok: r.status !== "failed",
      message: r.status === "failed" ? `not ${DONE[verb]}: ${r.error}` : (r.status === "skipped" ? `${DONE[verb]} (${r.error})` : DONE[verb]) })));
    busyRef.current = false;
    setSelected(new Set());
    setBusy(false);
    reload();
  });
  useEffect(() => {
    if (!bulk.error || !busyRef.current || bulk.action) return;
    busyRef.current = false; // refused (or its progress could not be read): said by the decisions below
    setBusy(false);
  }, [bulk.error]);
  // Every proposed match of the reconciliation, on every page: the bulk route's filter.
  async function decideAll(action) {
    if (busyRef.current || !chosen) return false;
    busyRef.current = true;
    setBusy(true);
    setResults([]);
    return bulk.start("reconciliation_matches/bulk", { action, filter: { reconciliation_id: Number(chosen) } });
  }
  async function decideMany(ids, action) {
    if (busyRef.current || !ids.length) return false;
    busyRef.current = true;
    setBusy(true);
    if (ids.length > 1) {
      setResults([]);
      return bulk.start("reconciliation_matches/bulk", { action, ids });
    }
    const outcome = [];
    setResults(outcome);
    for (const id of ids) {
      if (!mounted.current) return false; // the person left
      try {
        await decide(id, action);
        outcome.push({ id, action, ok: true, message: DONE[action] });
      } catch (failure) {
        outcome.push({ id, action, ok: false, message: `not ${DONE[action]}: ${failure.message}` });
      }
      setResults([...outcome]);
    }
    busyRef.current = false;
    setSelected(new Set());
    setBusy(false);
    reload();
    return true;
  }

  const rows = data ? data.data : [];
  const selectable = rows.filter((m) => m.status === "proposed");
  const allChecked = selectable.length > 0 && selectable.every((m) => selected.has(m.id));
  const toggle = (id, on) => setSelected((before) => {
    const next = new Set(before);
    if (on) next.add(id); else next.delete(id);
    return next;
  });
  const inOrder = () => rows.filter((m) => selected.has(m.id)).map((m) => m.id);
  const ok = results ? results.filter((r) => r.ok).length : 0;

  return html`
    <form class="toolbar" onSubmit=${(e) => e.preventDefault()} aria-label="Filter matches">
      <div>
        <label for="match-reconciliation">Reconciliation</label>
        <select id="match-reconciliation" value=${String(chosen)}
          onChange=${(e) => filter({ reconciliation_id: e.currentTarget.value, status })}>
          ${(reconciliations.data?.data || []).map((r) => html`<option value=${String(r.id)}>${r.name}</option>`)}
          ${reconciliations.data && chosen && !reconciliations.data.data.some((r) => String(r.id) === String(chosen))
            && html`<option value=${String(chosen)}>Reconciliation ${chosen}</option>`}
        </select>
      </div>
      <div>
        <label for="match-status">Status</label>
        <select id="match-status" value=${status} onChange=${(e) => filter({ reconciliation_id: chosen, status: e.currentTarget.value })}>
          <option value="proposed">Proposed</option>
          <option value="confirmed">Confirmed</option>
          <option value="all">All</option>
        </select>
      </div>
    </form>
    ${path && html`<${ExportButton} kind="matches" filters=${exportFilters(path)} label="Export these matches" />`}
    <${Problem} error=${reconciliations.error} what="load the reconciliations" />
    ${reconciliations.data && !reconciliations.data.data.length && html`<p>No reconciliations yet.</p>`}
    <${Problem} error=${error} what="load the matches" />
    ${loading && !data && chosen && html`<p>Loading matches…</p>`}
    ${data && !rows.length && html`<p>No ${status === "all" ? "" : `${status} `}matches${paging.page > 1 ? " on this page" : ""}.</p>`}
    ${approver && selectable.length > 0 && html`
      <div class="actions bulk">
        <button type="button" onClick=${() => decideMany(inOrder(), "confirm")}
          aria-disabled=${busy || !selected.size ? "true" : undefined}>Confirm selected</button>
        <${Confirm} label="Reject selected" disabled=${!selected.size} busy=${busy}
          question=${`Reject ${plural(selected.size, "match", "matches")}? Their records are open again.`}
          yes="Yes, reject" onYes=${() => decideMany(inOrder(), "reject")} />
        <span>${selected.size} selected</span>
        ${status === "proposed" && html`
          <${Confirm} label="Confirm all proposed" busy=${busy}
            question="Confirm every proposed match of this reconciliation, on every page?" yes="Yes, confirm all"
            onYes=${() => decideAll("confirm")} />
          <${Confirm} label="Reject all proposed" busy=${busy}
            question="Reject every proposed match of this reconciliation, on every page? Their records are open again."
            yes="Yes, reject all" onYes=${() => decideAll("reject")} />`}
      </div>`}
    ${rows.length > 0 && html`
      <table class="matches">
        <caption class="visually-hidden">Matches, newest first</caption>
        <thead><tr>
          ${approver && html`<th scope="col"><input type="checkbox" id="match-all" checked=${allChecked} disabled=${!selectable.length}
            aria-label="Select all proposed matches on this page"
            onChange=${(e) => setSelected(e.currentTarget.checked ? new Set(selectable.map((m) => m.id)) : new Set())} /></th>`}
          <th scope="col">Match</th><th scope="col">Status</th><th scope="col">Rule</th><th scope="col">Group</th>
          <th scope="col" class="number">Records</th><th scope="col">Made</th>
          ${approver && html`<th scope="col">Decide</th>`}
        </tr></thead>
        <tbody>
          ${rows.map((m) => html`<tr key=${m.id} data-match-id=${m.id}>
            ${approver && html`<td>${m.status === "proposed" && html`<input type="checkbox" id=${`match-${m.id}-selected`}
              checked=${selected.has(m.id)} onChange=${(e) => toggle(m.id, e.currentTarget.checked)}
              aria-label=${`Select match ${m.id}`} />`}</td>`}
            <td><a href=${`#/matches/${m.id}`}>Match ${m.id}</a></td>
            <td>${m.status}</td>
            <td>${m.reconciliation_rule_id === null ? "by hand" : `rule ${m.reconciliation_rule_id}`}</td>
            <td class="group-key">${m.group_key}</td>
            <td class="number">${m.record_count ?? (m.records ? m.records.length : "—")}</td>
            <td><${When} iso=${m.created_at} /></td>
            ${approver && html`<td>${m.status === "proposed" && html`<div class="actions row-actions">
              <button type="button" onClick=${() => decideMany([m.id], "confirm")} aria-disabled=${busy ? "true" : undefined}
                aria-label=${`Confirm match ${m.id}`}>Confirm</button>
              <button type="button" class="danger" onClick=${() => decideMany([m.id], "reject")} aria-disabled=${busy ? "true" : undefined}
                aria-label=${`Reject match ${m.id}`}>Reject</button></div>`}</td>`}
          </tr>`)}
        </tbody>
      </table>`}
    ${data && html`<${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Matches" />`}
    ${bulk.action && busy && html`<p class="muted" data-testid="matches-bulk-progress">Bulk action ${bulk.action.id}:
      <progress max="100" value=${bulk.action.progress ?? 0} aria-label=${`Bulk action ${bulk.action.id} progress`}></progress>
      ${bulk.action.processed_items} of ${plural(bulk.action.total_items, "match", "matches")} decided</p>`}
    <${Problem} error=${bulk.error} what=${bulk.action ? "read the bulk decision's progress" : "decide the selected matches"} />
    ${results && results.length > 0 && html`
      <section class="decisions" aria-labelledby="decisions-title">
        <h2 id="decisions-title">${busy ? "Deciding…" : `Decided: ${ok} of ${results.length}`}</h2>
        <ul>${results.map((r) => html`<li key=${r.id} class=${r.ok ? "ok" : "error"} data-match-id=${r.id}>Match ${r.id}: ${r.message}</li>`)}</ul>
      </section>`}
    <${Status} text=${results && results.length > 0 && !busy ? `${ok} of ${results.length} ${results.length === 1 ? "match" : "matches"} ${DONE[results[0].action]}.` : ""} />`;
}

function MatchDetail({ id }) {
  const { error, data, reload } = useApi(`reconciliation_matches/${encodeURIComponent(id)}`);
  const [outcome, setOutcome] = useState(null); // {ok, text}
  const [busy, setBusy] = useState(false);

  async function act(action) {
    if (busy) return;
    setBusy(true);
    try {
      await decide(data.id, action);
      setOutcome({ ok: true, action, text: action === "confirm" ? `Match ${data.id} confirmed.`
        : `Match ${data.id} rejected: its records are open again.` });
      if (action === "confirm") reload();
    } catch (failure) {
      setOutcome({ ok: false, text: `Could not ${action} match ${data.id}: ${failure.message}` });
    } finally {
      setBusy(false);
    }
  }

  const back = html`<p><a href=${data ? `#/matches?reconciliation_id=${data.reconciliation_id}&status=proposed` : "#/matches"}>All matches</a></p>`;
  if (error) return html`${back}<${Problem} error=${error} what="load the match" />`;
  if (!data) return html`<p>Loading the match…</p>`;
  const rejected = outcome?.ok && outcome.action === "reject";
  return html`
    ${back}
    <h2>Match ${data.id}</h2>
    <dl class="facts">
      <dt>Status</dt><dd data-testid="match-status">${rejected ? "rejected" : data.status}</dd>
      <dt>Reconciliation</dt><dd><a href=${`#/reconciliations/${data.reconciliation_id}`}>${data.reconciliation_id}</a></dd>
      <dt>Rule</dt><dd>${data.reconciliation_rule_id === null ? "made by hand" : data.reconciliation_rule_id}</dd>
      <dt>Run</dt><dd>${data.run_id ?? "—"}</dd>
      <dt>Group</dt><dd class="group-key">${data.group_key}</dd>
      <dt>Made</dt><dd><${When} iso=${data.created_at} /></dd>
      ${data.reason && html`<dt>Reason</dt><dd>${data.reason}</dd>`}
      <dt>Differences</dt><dd>${Object.entries(data.differences || {}).filter(([k]) => k !== "conversions")
        .map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join("; ") || "none"}</dd>
      ${(data.differences?.conversions || []).length > 0 && html`<dt>Converted</dt><dd><ul class="conversions"
        data-testid="match-conversions">${data.differences.conversions.map((n) => html`<${Conversion} key=${n.record_id} note=${n} />`)}</ul></dd>`}
    </dl>
    ${can("approver") && data.status === "proposed" && !rejected && html`
      <div class="actions">
        <button type="button" onClick=${() => act("confirm")} aria-disabled=${busy ? "true" : undefined}>Confirm match</button>
        <button type="button" class="danger" onClick=${() => act("reject")} aria-disabled=${busy ? "true" : undefined}>Reject match</button>
      </div>`}
    ${outcome && html`<p class=${outcome.ok ? "status" : "error"} role=${outcome.ok ? "status" : "alert"}>${outcome.text}</p>`}
    <${MatchShares} match=${data} />
    ${data.records ? html`<${MatchRecords} records=${data.records} reconciliationId=${data.reconciliation_id} />`
      : html`<${PagedRecords} matchId=${data.id} count=${data.record_count} reconciliationId=${data.reconciliation_id} />`}
    <${ExportButton} kind="records" filters=${{ reconciliation_match_id: String(data.id) }} label="Export the match's records" />`;
}

function RecordsTable({ records, caption, reconciliationId }) {
  const sides = [["a", "Side A"], ["b", "Side B"], [undefined, "Records"]];
  return sides.map(([side, title]) => {
    const shown = records.filter((r) => r.side === side);
    if (!shown.length) return null;
    return html`
      <section aria-label=${`${caption}: ${title}`}>
        <h3>${title}</h3>
        <table class="match-records">
          <caption class="visually-hidden">${caption}: ${title}</caption>
          <thead><tr><th scope="col">Record</th><th scope="col">Stream</th><th scope="col">Date</th>
            <th scope="col" class="number">Amount</th><th scope="col">Direction</th><th scope="col">Description</th>
            <th scope="col">External id</th><th scope="col">Status</th></tr></thead>
          <tbody>${shown.map((r) => html`<tr data-record-id=${r.id}>
            <td>${r.id}</td><td>${r.data_stream_key}</td><td><time datetime=${r.date}>${r.date}</time></td>
            <td class="number"><${Money} amount=${r.amount} places=${r.decimal_places} currency=${r.currency} /></td>
            <td>${r.direction}</td><td>${r.description || "—"}<${PartPaid} record=${r} reconciliationId=${reconciliationId} /></td><td>${r.external_id || "—"}</td><td>${r.status}</td>
          </tr>`)}</tbody>
        </table>
      </section>`;
  });
}

function MatchRecords({ records, reconciliationId }) {
  return html`<${RecordsTable} records=${records} caption="The match's records" reconciliationId=${reconciliationId} />`;
}

// A match of more than 100 records: its records a page at a time (GET /records?reconciliation_match_id).
function PagedRecords({ matchId, count, reconciliationId }) {
  const paging = usePaging();
  const { error, data } = useApi(`records${query({ reconciliation_match_id: matchId, limit: 100, cursor: paging.cursor })}`);
  return html`
    <p>${count} records.</p>
    <${Problem} error=${error} what="load the match's records" />
    ${data && html`<${RecordsTable} records=${data.data} caption="The match's records" reconciliationId=${reconciliationId} />
      <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Records" />`}
    <${Status} text=${data ? "" : "Loading records…"} />`;
}
