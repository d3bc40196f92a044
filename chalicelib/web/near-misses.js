// Near misses on an exception's page (docs/near-misses.md): for each of its newest open records and each
// active rule, the closest candidate on the other side and every condition the pair fails, in the
// service's words (amounts as exact decimals: no float here). Read apart from the detail
// (GET …/{id}?near_misses=true reads the reconciliation's open records), again after each change.
import { useEffect, useState } from "preact/hooks";
import { api, html } from "./api.js";
import { Money, plural, Problem, useApi } from "./ui.js";

export function Conversion({ note }) {
  const whose = note.record === "subject" ? "this record" : note.record === "candidate" ? "the candidate" : `record ${note.record_id}`;
  return html`<li>Converted (${whose}): ${note.amount} ${note.from_currency} at ${note.pair} ${note.rate}${note.inverted
    ? " (divided: only the reverse pair had a rate)" : ""} of ${note.rate_date} = ${note.converted_amount} ${note.to_currency}</li>`;
}

function RecordLine({ record, id }) {
  if (!record) return html`<span>record ${id}</span>`;
  return html`<span>record ${record.id}: ${record.date}, <${Money} amount=${record.amount} places=${record.decimal_places}
    currency=${record.currency} />, ${record.direction}${record.description ? `, “${record.description}”` : ""}</span>`;
}

export function NearMisses({ exception, tick }) {
  const { data, error, reload } = useApi(`reconciliation_exceptions/${exception.id}?near_misses=true`);
  useEffect(() => { if (tick) reload(); }, [tick]);
  const [records, setRecords] = useState(new Map());
  const found = data ? data.near_misses : null;
  const ids = found ? [...new Set(found.data.flatMap((m) => [m.record_id, m.candidate_record_id]).filter((i) => i !== null))].slice(0, 60) : [];
  useEffect(() => {
    if (!ids.length) return undefined;
    let gone = false;
    Promise.all(ids.map((id) => api(`records/${id}`).catch(() => null)))
      .then((read) => { if (!gone) setRecords(new Map(read.filter(Boolean).map((r) => [r.id, r]))); });
    return () => { gone = true; };
  }, [ids.join(",")]);

  const rules = new Map((found?.rules || []).map((r) => [r.reconciliation_rule_id, r]));
  const byRecord = [];
  for (const miss of found?.data || []) {
    let entry = byRecord.find((e) => e.id === miss.record_id);
    if (!entry) byRecord.push(entry = { id: miss.record_id, misses: [] });
    entry.misses.push(miss);
  }
  return html`
    <section class="near-misses" aria-labelledby="near-misses-title" aria-busy=${!data && !error ? "true" : "false"}>
      <h2 id="near-misses-title">Why its records did not match</h2>
      <${Problem} error=${error} what="explain the records" />
      ${!data && !error && html`<p>Looking for each record's closest candidate…</p>`}
      ${found && found.refused && html`<p class="error">Not explained: ${found.refused}</p>`}
      ${found && !found.refused && html`
        <p class="muted">${plural(found.records, "open record")} of this exception (its newest, at most 20), each under every
          active rule: the closest open record of the other side and the conditions the pair fails.</p>
        ${found.rules.filter((r) => !r.explained).map((r) => html`<p class="muted" key=${r.reconciliation_rule_id}>Rule
          “${r.name}” is not explained: ${r.reason}</p>`)}
        ${found.rules.length === 0 && html`<p>The reconciliation has no active rule: nothing would match these records.</p>`}
        ${found.rules.length > 0 && !byRecord.length && html`<p>No open record of this exception left to explain.</p>`}
        ${byRecord.map((entry) => html`
          <article class="near-miss" key=${entry.id} data-record-id=${entry.id} aria-labelledby=${`near-miss-${entry.id}`}>
            <h3 id=${`near-miss-${entry.id}`}>Record ${entry.id}</h3>
            <p><${RecordLine} record=${records.get(entry.id)} id=${entry.id} /></p>
            <ul>${entry.misses.map((m) => html`<li key=${m.reconciliation_rule_id} data-rule-id=${m.reconciliation_rule_id}>
              Under “${rules.get(m.reconciliation_rule_id)?.name || `rule ${m.reconciliation_rule_id}`}”:
              ${m.candidate_record_id === null ? html` no open record on the other side to compare with.`
                : m.would_match ? html` <span data-testid="would-match">it meets every condition with${" "}<${RecordLine}
                  record=${records.get(m.candidate_record_id)} id=${m.candidate_record_id} />${": a run would match them (that record may have arrived after the last run)."}</span>`
                : html` the closest candidate is <${RecordLine} record=${records.get(m.candidate_record_id)} id=${m.candidate_record_id} />${
                  `, failing ${plural(m.failed_condition_count, "condition")}:`}
                  <ul class="failed-conditions">${m.failed_conditions.map((c, i) => html`<li key=${i} data-field=${c.field}>${c.message}</li>`)}</ul>`}
              ${(m.conversions || []).length > 0 && html`<ul class="conversions">${m.conversions.map((n, i) => html`<${Conversion} key=${i} note=${n} />`)}</ul>`}
            </li>`)}</ul>
          </article>`)}`}
    </section>`;
}

// A dry run's near misses (its `near_misses`, docs/near-misses.md): the records it leaves open, of its
// sample, each with its closest candidate under the rule and the conditions that pair fails.
export function DryRunNearMisses({ nearMisses, rule }) {
  if (!nearMisses) return null;
  if (!nearMisses.explained) return html`<p class="muted">Records left open are not explained: ${nearMisses.reason}</p>`;
  if (!nearMisses.sample.length) return html`<p class="muted">It leaves no record open.</p>`;
  return html`
    <div class="dry-run-near-misses" data-testid=${`dry-run-near-misses-${rule.id}`}>
      <h5>${`Why records stay open: ${nearMisses.sample.length} of the ${nearMisses.left_open} it leaves open`}</h5>
      <ul>${nearMisses.sample.map((m) => html`<li key=${`${m.side}-${m.record_id}`} data-record-id=${m.record_id}>
        ${`Record ${m.record_id} (side ${m.side.toUpperCase()}): `}${m.candidate_record_id === null
          ? "no open record on the other side to compare with."
          : m.would_match ? `it meets every condition with record ${m.candidate_record_id}, but a conflict kept them apart (one record wanted by two).`
          : html`${`closest candidate record ${m.candidate_record_id}, failing `}<span>${m.failed_conditions.map((c) => c.message).join("; ")}</span>`}
      </li>`)}</ul>
    </div>`;
}
