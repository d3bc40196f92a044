// Rules suggested from people's decisions (docs/learned-rules.md), on a reconciliation's page under its
// rules: a preparer asks for suggestions (POST …/rule_suggestions, answered within the request: the page
// shows it busy meanwhile); each proposed rule shows its conditions and its evidence in words; an admin
// (the API's role for accept and dismiss) accepts one at a chosen priority or dismisses it. Viewers read.
import { useEffect, useRef, useState } from "preact/hooks";
import { api, can, html, money } from "./api.js";
import { describeCondition, DryRunResult } from "./reconciliations-rules.js";
import { Confirm, FieldError, invalid, plural, Problem, useApi, When } from "./ui.js";

// The least role each step needs, as chalicelib/api/route_roles.py has it.
const SUGGEST_ROLE = "preparer";
const DECIDE_ROLE = "admin";

const CARDINALITY_WORDS = { one_to_one: "one to one", one_to_many: "one to many", many_to_one: "many to one",
  many_to_many: "many to many" };

// Basis points in words without floating point: 125 -> "1.25%".
export function basisPoints(bp) {
  const n = BigInt(bp);
  return `${n / 100n}.${String(n % 100n).padStart(2, "0")}%`;
}

// "from -30 to -10 minor units (most often -30)", or "-30 minor units" when all agree.
function range(seen, unit, shown = (n) => `${n}`) {
  if (!seen) return "";
  if (seen.min === seen.max) return `${shown(seen.min)}${unit ? ` ${unit}` : ""}`;
  return `from ${shown(seen.min)} to ${shown(seen.max)}${unit ? ` ${unit}` : ""} (most often ${shown(seen.most_common)})`;
}

// Amount differences as money when the decisions are of one currency, else in each one's minor units.
function amountRange(seen) {
  return seen.currency ? range(seen, "", (n) => money(n, seen.decimal_places, seen.currency)) : range(seen, "minor units");
}

// What a suggestion's evidence says, sentence by sentence ([{key, text}]), in plain words.
export function evidenceWords(e) {
  if (!e) return [];
  const lines = [];
  const kinds = e.decisions_by_kind || {};
  const cardinality = Object.keys(e.cardinalities || {}).length > 1
    ? ` (${plural(e.decisions_of_cardinality, "decision")} of the most common shape)` : "";
  lines.push({ key: "explained", text: `Explains ${e.decisions_explained} of the ${plural(e.decisions_of_cardinality, "decision")}`
    + `${cardinality} people made: on those records alone it makes exactly their matches. Decisions read: ${e.decisions_read}`
    + ` (${kinds.manual || 0} matched by hand, ${kinds.investigation || 0} accepted investigations).` });
  if (e.decisions_contradicted === null || e.decisions_contradicted === undefined) {
    lines.push({ key: "contradicted", text: "Whether it contradicts a decision could not be measured." });
  } else {
    lines.push({ key: "contradicted", text: e.decisions_contradicted === 0 ? "Contradicts no decision."
      : `Contradicts ${plural(e.decisions_contradicted, "decision")}: it would pair their records with others.` });
  }
  const d = e.dry_run || {};
  if (d.refused) {
    lines.push({ key: "dry-run", text: `Its dry run over the open records was refused: ${d.refused}` });
  } else if (d.matches !== undefined && d.matches !== null) {
    const open = d.open_records ? ` (side A ${d.open_records.side_a}, side B ${d.open_records.side_b})` : "";
    lines.push({ key: "dry-run", text: `Over the open records${open}, run after the active rules, it would add `
      + `${plural(d.matches, "match", "matches")} of ${plural(d.matched_records, "record")}.` });
    lines.push({ key: "conflicts", text: d.conflicting_matches === 0 ? "None of its matches takes a record people matched elsewhere."
      : `${plural(d.conflicting_matches, "match", "matches")} would take a record people matched elsewhere (conflicts).` });
    if (d.decisions_remade !== undefined) lines.push({ key: "remade", text: `It remakes ${plural(d.decisions_remade, "decision")} exactly.` });
  }
  const o = e.observed || {};
  const amount = o.amount_difference;
  if (amount) {
    let text = amount.explained_by === "equal" ? "Amounts agree in every decision."
      : `Side B differs from side A by ${amountRange(amount)}`;
    if (amount.explained_by === "percent" && amount.basis_points !== undefined) text += `, at most ${basisPoints(amount.basis_points)} of side A`;
    if (amount.explained_by !== "equal") text += ".";
    if (amount.outliers) text += ` ${plural(amount.outliers, "decision")} with an outlying difference left unexplained.`;
    lines.push({ key: "amount", text });
  }
  if (o.date_lag_days) {
    lines.push({ key: "date", text: o.date_lag_days.max === 0 && o.date_lag_days.min === 0 ? "Booked on the same day in every decision."
      : `Dates apart by ${range(o.date_lag_days, "days")}.` });
  }
  if (o.direction) lines.push({ key: "direction", text: `Same direction in ${o.direction.same}, opposite in ${o.direction.opposite}.` });
  const t = e.text_agreement;
  if (t && t.condition) {
    lines.push({ key: "text", text: `“${describeCondition(t.condition)}” holds in ${t.decisions_passed} decisions and in `
      + `${t.other_pairs_passed} of ${plural(t.other_pairs, "pair")} people did not match together.` });
  }
  const tokens = o.shared_tokens;
  if (tokens && tokens.decisions_with_shared_token) {
    const examples = (tokens.examples || []).slice(0, 3).join(", ");
    lines.push({ key: "tokens", text: `${plural(tokens.decisions_with_shared_token, "decision")} share a word with a digit`
      + `${examples ? ` (such as ${examples})` : ""}.` });
  }
  return lines;
}

const rank = (r) => (r.evidence && Number.isInteger(r.evidence.rank) ? r.evidence.rank : Number.MAX_SAFE_INTEGER);

export function SuggestionsSection({ reconciliation, onAccepted }) {
  const path = `reconciliations/${reconciliation.id}/rules?status=proposed`;
  const { data, error, loading, reload } = useApi(path);
  const dismissed = useApi(`reconciliations/${reconciliation.id}/rules?status=dismissed`);
  const [asking, setAsking] = useState(false);
  const [asked, setAsked] = useState(null); // the last computation's answer
  const [failure, setFailure] = useState(null);
  const [status, setStatus] = useState("");
  const heading = useRef(null);
  const mounted = useRef(true);
  useEffect(() => () => { mounted.current = false; }, []);
  const proposed = data ? [...data.data].sort((x, y) => rank(x) - rank(y)) : [];

  async function suggest() {
    if (asking) return;
    setAsking(true);
    setFailure(null);
    setStatus("Reading the decisions and dry running each suggestion…");
    try {
      const answer = await api(`reconciliations/${reconciliation.id}/rule_suggestions`, { method: "POST", body: {} });
      if (!mounted.current) return;
      setAsked(answer);
      const kinds = answer.decisions_by_kind || {};
      setStatus(answer.decisions_read === 0
        ? "No decisions to learn from yet: match records by hand, or accept an investigation, first."
        : `Read ${plural(answer.decisions_read, "decision")} (${kinds.manual || 0} by hand, ${kinds.investigation || 0} `
          + `accepted investigations): ${plural(answer.data.length, "rule")} suggested`
          + `${answer.replaced ? `, ${answer.replaced} earlier ${answer.replaced === 1 ? "suggestion" : "suggestions"} replaced` : ""}.`);
      reload();
    } catch (problem) {
      if (!mounted.current) return;
      setStatus("");
      setFailure(problem);
    } finally {
      if (mounted.current) setAsking(false);
    }
  }

  // A suggestion accepted or dismissed leaves the list: the focus goes to the section's heading.
  function decided(text, accepted) {
    setStatus(text);
    reload();
    dismissed.reload();
    if (accepted) onAccepted?.();
    setTimeout(() => heading.current?.focus(), 0);
  }

  return html`
    <section class="suggestions" aria-labelledby="suggestions-title" aria-busy=${asking ? "true" : "false"}>
      <h3 id="suggestions-title" tabindex="-1" ref=${heading}>Suggestions learned from decisions</h3>
      <p class="hint">Learned from the matches people made by hand and the investigations they accepted. A suggestion
        runs nowhere until it is accepted${can(DECIDE_ROLE) ? "" : " (by an admin)"}.</p>
      ${can(SUGGEST_ROLE) && html`
        <div class="actions">
          <button type="button" onClick=${suggest} aria-disabled=${asking ? "true" : undefined}
            aria-describedby="suggestions-replace">${asking ? "Suggesting…" : "Suggest rules from decisions"}</button>
          <span id="suggestions-replace" class="muted">Replaces the suggestions listed now.</span>
        </div>`}
      ${asking && html`<div class="progress-line"><progress aria-label="Suggesting rules"></progress>
        <span>Reading the decisions and dry running each suggestion…</span></div>`}
      <p class="status" role="status" data-testid="suggestions-status">${status}</p>
      <${Problem} error=${failure} what="suggest rules" />
      <${Problem} error=${error} what="load the suggested rules" />
      ${loading && !data && html`<p>Loading suggestions…</p>`}
      ${data && !proposed.length && html`<p class="muted">No suggestion waiting${asked ? "" : can(SUGGEST_ROLE)
        ? ": ask for suggestions once people have matched records by hand" : ""}.</p>`}
      ${proposed.length > 0 && html`
        <ol class="suggestion-list">
          ${proposed.map((rule) => html`<${Suggestion} key=${rule.id} rule=${rule} onDecided=${decided} />`)}
        </ol>`}
      ${dismissed.data && dismissed.data.data.length > 0 && html`
        <details class="dismissed">
          <summary>Dismissed suggestions (${dismissed.data.data.length})</summary>
          <p class="muted">Kept so that they are not suggested again.</p>
          <ul>${dismissed.data.data.map((r) => html`<li key=${r.id}>${r.name}: ${r.conditions.map(describeCondition).join("; ")}</li>`)}</ul>
        </details>`}
    </section>`;
}

function Suggestion({ rule, onDecided }) {
  const e = rule.evidence || {};
  const [priority, setPriority] = useState(String(rule.priority));
  const [busy, setBusy] = useState(false);
  const [failure, setFailure] = useState(null);
  const id = `suggestion-${rule.id}-priority`;
  const fieldError = failure && (failure.errors || []).filter((x) => x.field === "priority").map((x) => x.message).join("; ");
  const decide = can(DECIDE_ROLE);
  const [dry, setDry] = useState(null); // its dry run now: {busy} | {result} | {error}

  // A proposed rule dry runs as any rule (after the active ones), its near misses included.
  async function dryRun() {
    if (dry?.busy) return;
    setDry({ busy: true });
    try {
      setDry({ result: await api(`reconciliation_rules/${rule.id}/dry_run`, { method: "POST" }) });
    } catch (problem) {
      setDry({ error: problem });
    }
  }

  async function accept(event) {
    event.preventDefault();
    if (busy) return;
    const text = priority.trim();
    // A whole number, sent as one; anything else is sent as typed for the API to name (422).
    const value = /^\d+$/.test(text) && Number.isSafeInteger(Number(text)) ? Number(text) : text;
    setBusy(true);
    setFailure(null);
    try {
      const accepted = await api(`reconciliation_rules/${rule.id}/accept`, { method: "POST", body: { priority: value } });
      onDecided(`Accepted “${accepted.name}” at priority ${accepted.priority}: it is now an active rule.`, true);
    } catch (problem) {
      setFailure(problem);
    } finally {
      setBusy(false);
    }
  }

  async function dismiss() {
    if (busy) return false;
    setBusy(true);
    setFailure(null);
    try {
      await api(`reconciliation_rules/${rule.id}/dismiss`, { method: "POST" });
      onDecided(`Dismissed “${rule.name}”: it will not be suggested again.`, false);
      return true;
    } catch (problem) {
      setFailure(problem);
      return false;
    } finally {
      setBusy(false);
    }
  }

  const d = e.dry_run || {};
  return html`
    <li class="suggestion-rule" data-rule-id=${rule.id} aria-labelledby=${`suggestion-${rule.id}-name`}>
      <h4 id=${`suggestion-${rule.id}-name`}>${rule.name}</h4>
      <p class="rule-facts"><span class="badge proposed">${rule.status}</span> <span class="badge learned">${rule.source === "learned"
        ? "learned from decisions" : rule.source}</span> ${` Rank ${e.rank ?? "—"} · ${CARDINALITY_WORDS[rule.cardinality] || rule.cardinality}`}
        ${e.computed_at && html` · computed <${When} iso=${e.computed_at} />`}</p>
      <p class="muted">Conditions (all must hold):</p>
      <ul class="conditions">${rule.conditions.map((c, i) => html`<li key=${i}>${describeCondition(c)}</li>`)}</ul>
      <h5>Evidence</h5>
      <ul class="evidence" data-testid=${`evidence-${rule.id}`}>
        ${evidenceWords(e).map((line) => html`<li key=${line.key} data-evidence=${line.key}>${line.text}</li>`)}
      </ul>
      ${(d.sample || []).length > 0 && html`
        <table class="sample">
          <caption>Matches it would add (a sample of ${d.sample.length} of ${d.matches})</caption>
          <thead><tr><th scope="col">Side A records</th><th scope="col">Side B records</th></tr></thead>
          <tbody>${d.sample.map((m, i) => html`<tr key=${i}><td>${m.side_a_record_ids.join(", ")}</td>
            <td>${m.side_b_record_ids.join(", ")}</td></tr>`)}</tbody>
        </table>`}
      ${(d.conflicts_sample || []).length > 0 && html`
        <table class="sample conflicts">
          <caption>Conflicts (a sample of ${d.conflicts_sample.length} of ${d.conflicting_matches})</caption>
          <thead><tr><th scope="col">Side A records</th><th scope="col">Side B records</th>
            <th scope="col">Records people matched otherwise</th></tr></thead>
          <tbody>${d.conflicts_sample.map((m, i) => html`<tr key=${i}><td>${m.side_a_record_ids.join(", ")}</td>
            <td>${m.side_b_record_ids.join(", ")}</td><td>${(m.decided_record_ids || []).join(", ")}</td></tr>`)}</tbody>
        </table>`}
      ${can(SUGGEST_ROLE) && html`<div class="actions"><button type="button" class="secondary" onClick=${dryRun}
        aria-label=${`Dry run ${rule.name}`} aria-disabled=${dry?.busy ? "true" : undefined}>Dry run</button></div>`}
      ${dry && html`<${DryRunResult} rule=${rule} state=${dry} />`}
      ${decide ? html`
        <form class="inline accept-form" onSubmit=${accept} aria-label=${`Accept or dismiss ${rule.name}`} novalidate>
          <div class="field">
            <label for=${id}>Priority for “${rule.name}” (lower runs first)</label>
            <input id=${id} inputmode="numeric" value=${priority} onInput=${(ev) => setPriority(ev.currentTarget.value)}
              ...${invalid(id, fieldError)} />
            <${FieldError} id=${id} message=${fieldError} />
          </div>
          <div class="actions">
            <button type="submit" aria-label=${`Accept ${rule.name}`} aria-disabled=${busy ? "true" : undefined}>Accept</button>
            <${Confirm} label="Dismiss" name=${`Dismiss ${rule.name}`} question=${`Dismiss “${rule.name}”? It will not be suggested again.`}
              yes="Yes, dismiss" busy=${busy} onYes=${dismiss} />
          </div>
        </form>` : html`<p class="muted">Proposed at priority ${rule.priority}; an admin accepts or dismisses it.</p>`}
      ${failure && !fieldError && html`<${Problem} error=${failure} what=${`decide on “${rule.name}”`} />`}
      ${failure && fieldError && html`<p class="error" role="alert">Not accepted: ${failure.message}</p>`}
    </li>`;
}

