// Partial payments (docs/partial-payments.md): a record paid in part shows, per reconciliation, what its
// matches hold and what it has left, with links to those matches; a match that takes shares says which;
// and the form that matches records by hand takes each record's share (allocations). Money in minor
// units, shown and typed with money() and minorUnits() (BigInt), never a float.
import { useState } from "preact/hooks";
import { api, heldForApproval, html, minorUnits, money } from "./api.js";
import { FieldError, invalid, Money, plural } from "./ui.js";

// What a record has left in a reconciliation: its `allocations` entry's remaining amount, else all of it
// (a reconciliation not listed holds the record whole or not at all).
export function remainingIn(record, reconciliationId) {
  const entry = (record.allocations || []).find((a) => String(a.reconciliation_id) === String(reconciliationId));
  return entry ? entry.amount_remaining : record.amount;
}

// A record paid in part: one line per reconciliation holding shares of it. `reconciliationId` puts that
// reconciliation first and names the others.
export function PartPaid({ record, reconciliationId }) {
  const entries = [...(record.allocations || [])].sort((x, y) => (String(y.reconciliation_id) === String(reconciliationId))
    - (String(x.reconciliation_id) === String(reconciliationId)));
  if (!entries.length) return null;
  const m = (amount) => html`<${Money} amount=${amount} places=${record.decimal_places} currency=${record.currency} />`;
  return html`
    <ul class="part-paid" aria-label=${`Record ${record.id} paid in part`} data-testid=${`part-paid-${record.id}`}>
      ${entries.map((a) => html`<li key=${a.reconciliation_id} data-reconciliation-id=${a.reconciliation_id}>
        Paid in part${String(a.reconciliation_id) === String(reconciliationId) ? "" : html` in <a
          href=${`#/reconciliations/${a.reconciliation_id}`}>reconciliation ${a.reconciliation_id}</a>`}:
        ${" "}<span data-amount="allocated">${m(a.amount_allocated)}</span> allocated,
        ${" "}<span data-amount="remaining">${m(a.amount_remaining)}</span> remaining; shares:
        ${a.shares.map((s, i) => html`${i ? ", " : " "}<a href=${`#/matches/${s.reconciliation_match_id}`}
          aria-label=${`Match ${s.reconciliation_match_id}, holding ${money(s.amount, record.decimal_places, record.currency)}`}>match ${s.reconciliation_match_id}</a>
          ${" "}(${m(s.amount)})`)}
      </li>`)}
    </ul>`;
}


// A match that takes part of some records (`allocations`): which, and how much of each.
export function MatchShares({ match }) {
  if (!match.allocations || !match.allocations.length) return null;
  const byId = new Map((match.records || []).map((r) => [r.id, r]));
  return html`
    <section aria-labelledby="match-shares-title" class="match-shares">
      <h3 id="match-shares-title">Shares this match takes</h3>
      <p class="muted">It holds these records in part; the rest of each stays open until other matches cover it.</p>
      <ul>${match.allocations.map((a) => {
        const r = byId.get(a.record_id);
        return html`<li key=${a.record_id} data-record-id=${a.record_id}>Record ${a.record_id}:
          ${" "}${r ? html`<${Money} amount=${a.amount} places=${r.decimal_places} currency=${r.currency} /> of
          ${" "}<${Money} amount=${r.amount} places=${r.decimal_places} currency=${r.currency} />`
            : html`${a.amount} minor units`}</li>`;
      })}</ul>
    </section>`;
}

// A share typed as a decimal, as the number the API takes (minor units), or why it is not one.
function shareOf(text, record) {
  if (!text.trim()) return { amount: null };
  const units = minorUnits(text, record.decimal_places);
  if (units === null) return { problem: `is not an amount of ${record.currency} with at most ${record.decimal_places} decimals` };
  if (units <= 0n) return { problem: "must be above 0" };
  if (units > BigInt(Number.MAX_SAFE_INTEGER)) return { problem: "is too large to send exactly" };
  return { amount: Number(units) };
}

// Matches the chosen records by hand (POST /reconciliation_matches), each with the share it takes
// (empty: all it has left). `chosen`: [{record, side}], in the order picked.
export function ManualMatch({ reconciliationId, chosen, onRemove, onMatched }) {
  const [shares, setShares] = useState({}); // record id -> text typed
  const [allow, setAllow] = useState(false);
  const [reason, setReason] = useState("");
  const [here, setHere] = useState({}); // record id -> message of the page's own check
  const [failure, setFailure] = useState(null);
  const [done, setDone] = useState(null); // {text, matchId}
  const [busy, setBusy] = useState(false);
  const fieldId = (id) => `manual-share-${id}`;

  async function submit(event) {
    event.preventDefault();
    if (busy || !chosen.length) return;
    const problems = {};
    const allocations = [];
    for (const { record } of chosen) {
      const share = shareOf(shares[record.id] || "", record);
      if (share.problem) problems[record.id] = share.problem;
      else if (share.amount !== null) allocations.push({ record_id: record.id, amount: share.amount });
    }
    setHere(problems);
    setDone(null);
    setFailure(null);
    if (Object.keys(problems).length) {
      setTimeout(() => document.getElementById(fieldId(Object.keys(problems)[0]))?.focus(), 0);
      return;
    }
    const body = { reconciliation_id: Number(reconciliationId), record_ids: chosen.map((c) => c.record.id) };
    if (allocations.length) body.allocations = allocations;
    if (allow) { body.allow_difference = true; body.reason = reason; }
    setBusy(true);
    try {
      const answer = await api("reconciliation_matches", { method: "POST", body });
      const held = heldForApproval(answer);
      setDone(held ? { text: held, approvalId: answer.id } : { text: `Matched: match ${answer.id} holds ${plural(chosen.length, "record")}.`, matchId: answer.id });
      setShares({});
      setAllow(false);
      setReason("");
      onMatched();
      setTimeout(() => document.getElementById("manual-match-outcome")?.focus(), 0);
    } catch (problem) {
      setFailure(problem);
      setTimeout(() => document.getElementById("manual-match-problem")?.focus(), 0);
    } finally {
      setBusy(false);
    }
  }

  // A 422's errors by field: allocations[i].amount belongs to the i-th share sent.
  const sentShares = chosen.filter(({ record }) => (shares[record.id] || "").trim());
  const apiErrorOf = (recordId) => {
    if (!failure) return "";
    const index = sentShares.findIndex(({ record }) => record.id === recordId);
    return (failure.errors || []).filter((e) => index >= 0 && e.field.startsWith(`allocations[${index}]`)).map((e) => e.message).join("; ");
  };
  const otherErrors = failure ? (failure.errors || []).filter((e) => !/^allocations\[\d+\]/.test(e.field)) : [];

  return html`
    <section class="manual-match" aria-labelledby="manual-match-title">
      <h2 id="manual-match-title">Match by hand</h2>
      <p class="hint" id="manual-match-hint">Tick records of both sides in the tables below. A share is what this match
        takes of a record paid in part; leave it empty to take all the record has left. The sides' shares must balance.</p>
      <p class="status" role="status" id="manual-match-outcome" tabindex="-1" data-testid="manual-match-outcome">${done
        ? html`${done.text}${done.matchId ? html` <a href=${`#/matches/${done.matchId}`}>Open match ${done.matchId}</a>` : ""}${done.approvalId
          ? html` <a href=${`#/approvals/${done.approvalId}`}>Open approval ${done.approvalId}</a>` : ""}` : ""}</p>
      ${chosen.length === 0 ? html`<p class="muted">No record ticked yet.</p>` : html`
        <form onSubmit=${submit} aria-label="Match the ticked records" novalidate>
          <table class="manual-match-records">
            <caption class="visually-hidden">Records to match, with the share of each</caption>
            <thead><tr><th scope="col">Record</th><th scope="col">Side</th><th scope="col">Date</th>
              <th scope="col" class="number">Amount</th><th scope="col" class="number">Left here</th>
              <th scope="col">Share</th><th scope="col"><span class="visually-hidden">Remove</span></th></tr></thead>
            <tbody>${chosen.map(({ record, side }) => {
              const id = fieldId(record.id);
              const message = here[record.id] || apiErrorOf(record.id);
              return html`<tr key=${record.id} data-record-id=${record.id}>
                <td>${record.id}</td><td>${side.toUpperCase()}</td><td>${record.date}</td>
                <td class="number"><${Money} amount=${record.amount} places=${record.decimal_places} currency=${record.currency} /></td>
                <td class="number"><${Money} amount=${remainingIn(record, reconciliationId)} places=${record.decimal_places} currency=${record.currency} /></td>
                <td class="share"><label class="visually-hidden" for=${id}>Share of record ${record.id} (${record.currency})</label>
                  <input id=${id} inputmode="decimal" placeholder="all it has left" value=${shares[record.id] || ""}
                    onInput=${(e) => setShares((s) => ({ ...s, [record.id]: e.currentTarget.value }))} ...${invalid(id, message)} />
                  <${FieldError} id=${id} message=${message} /></td>
                <td><button type="button" class="secondary small" onClick=${() => onRemove(record.id)}
                  aria-label=${`Remove record ${record.id} from the match`}>Remove</button></td>
              </tr>`;
            })}</tbody>
          </table>
          <label class="choice"><input type="checkbox" checked=${allow} onChange=${(e) => setAllow(e.currentTarget.checked)} />
            Allow a difference between the sides</label>
          ${allow && html`<label for="manual-match-reason">Reason for the difference</label>
            <textarea id="manual-match-reason" rows="2" value=${reason} onInput=${(e) => setReason(e.currentTarget.value)}></textarea>`}
          ${failure && html`<div class="error" role="alert" id="manual-match-problem" tabindex="-1">
            ${otherErrors.length > 0 ? html`<p>Not matched:</p>
              <ul>${otherErrors.map((e) => html`<li><code>${e.field}</code>: ${e.message}</li>`)}</ul>`
              : html`<p>Not matched: ${failure.message}</p>`}
          </div>`}
          <button type="submit" aria-disabled=${busy ? "true" : undefined}>Match ${plural(chosen.length, "record")}</button>
        </form>`}
    </section>`;
}
