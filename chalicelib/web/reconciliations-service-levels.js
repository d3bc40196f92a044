// A reconciliation's service levels, on its page (#/reconciliations/<id>; docs/service-levels.md): the
// policy (severity from amount and age thresholds, a due time per severity: read by all, replaced or
// reset to the defaults by approvers and admins), the aging of its open exceptions (buckets and
// severities, each count a link to the queue filtered to them), and its routing rules (which team new
// exceptions go to: listed for all, added, edited and deleted by approvers and admins). The API checks
// every role again; its refusals are shown as it words them.
import { useEffect, useState } from "preact/hooks";
import { api, can, html, minorUnits, money } from "./api.js";
import { count, personName, queueHash, SEVERITIES, usePeople } from "./exceptions.js";
import { Confirm, FieldError, invalid, Money, Outcome, Problem, useAction, useAll, useApi, When } from "./ui.js";

const LEVELS = ["medium", "high", "critical"];
const AGES = [["0_1d", "Under a day"], ["1_3d", "1 to 3 days"], ["3_7d", "3 to 7 days"], ["7_30d", "7 to 30 days"],
  ["30d_plus", "30 days or more"]];
const ROLES = ["viewer", "preparer", "approver", "admin"];
const STRATEGIES = { round_robin: "Round robin", least_loaded: "Least loaded" };

export function ServiceLevelSections({ reconciliation }) {
  return html`<${PolicySection} reconciliation=${reconciliation} />
    <${AgingSection} reconciliation=${reconciliation} />
    <${RoutingSection} reconciliation=${reconciliation} />`;
}

const hours = (h) => (h % 24 === 0 ? `${h / 24} day${h === 24 ? "" : "s"}` : `${h} hour${h === 1 ? "" : "s"}`);
const currencyWords = (c) => (c === "*" ? "Any other currency" : c);

function PolicySection({ reconciliation }) {
  const path = `reconciliations/${reconciliation.id}/service_levels`;
  const { error, data, reload } = useApi(path);
  const [editing, setEditing] = useState(false);
  const reset = useAction();
  const approver = can("approver");
  const places = data ? data.amount_decimal_places : 2;
  async function resetToDefaults() {
    const done = await reset.run(() => api(path, { method: "DELETE" }), () => "The service-level policy is back to the defaults.");
    if (done !== undefined) reload();
    return true;
  }
  return html`
    <section aria-labelledby="sla-title" class="service-levels">
      <h2 id="sla-title">Service levels</h2>
      <${Problem} error=${error} what="load the service-level policy" />
      ${!data && !error && html`<p>Loading the service-level policy…</p>`}
      ${data && !editing && html`
        <p data-testid="sla-source">${data.default ? "The defaults: this reconciliation has no policy of its own."
          : html`This reconciliation's own policy (version ${data.version}), set <${When} iso=${data.updated_at} />.`}</p>
        <table class="sla-thresholds" data-testid="sla-thresholds">
          <caption>Severity: the highest level whose amount or age an exception reaches (low otherwise)</caption>
          <thead><tr><th scope="col">Threshold</th>${LEVELS.map((l) => html`<th scope="col" class="number">${l}</th>`)}</tr></thead>
          <tbody>
            ${Object.entries(data.amount_thresholds).map(([c, t]) => html`<tr key=${c}>
              <th scope="row">Amount, ${currencyWords(c)}</th>
              ${LEVELS.map((l) => html`<td class="number">${t[l] === null || t[l] === undefined ? "—"
                : html`<${Money} amount=${t[l]} places=${places} currency=${c === "*" ? "" : c} />`}</td>`)}
            </tr>`)}
            <tr><th scope="row">Age (days since the oldest record)</th>
              ${LEVELS.map((l) => html`<td class="number">${data.age_thresholds[l] ?? "—"}</td>`)}</tr>
          </tbody>
        </table>
        <p data-testid="sla-due">Due after opening: ${SEVERITIES.map((s) => `${s} ${hours(data.due_in_hours[s])}`).join(", ")}.</p>
        ${approver && html`<div class="actions">
          <button type="button" class="secondary" onClick=${() => { reset.clear(); setEditing(true); }}>Edit the service levels</button>
          ${!data.default && html`<${Confirm} label="Reset to the defaults" question="Delete this policy and use the defaults?"
            yes="Yes, reset" busy=${reset.busy} onYes=${resetToDefaults} />`}
        </div>`}
        <${Outcome} action=${reset} />`}
      ${data && editing && html`<${PolicyForm} path=${path} policy=${data}
        onDone=${(saved) => { setEditing(false); if (saved) reload(); }} />`}
    </section>`;
}

// The policy as typed: per currency, its three amounts as decimals (sent in minor units at the decimal
// places typed); ages in whole days; due times in whole hours. The whole policy is PUT, with the
// version read (409 when someone changed it since).
function PolicyForm({ path, policy, onDone }) {
  const places0 = policy.amount_decimal_places;
  const [places, setPlaces] = useState(String(places0));
  const [rows, setRows] = useState(Object.entries(policy.amount_thresholds).map(([currency, t]) => ({
    currency, ...Object.fromEntries(LEVELS.map((l) => [l, t[l] === null || t[l] === undefined ? "" : money(t[l], places0)])) })));
  const [ages, setAges] = useState(Object.fromEntries(LEVELS.map((l) => [l, policy.age_thresholds[l] ?? ""].map(String))));
  const [due, setDue] = useState(Object.fromEntries(SEVERITIES.map((s) => [s, String(policy.due_in_hours[s])])));
  const [problem, setProblem] = useState("");
  const [refusal, setRefusal] = useState(null); // the API's answer to the last try
  const [busy, setBusy] = useState(false);
  useEffect(() => { document.getElementById("sla-places")?.focus(); }, []);
  // The refusal's messages by field ("due_in_hours.low"), each shown under its input too.
  const said = Object.fromEntries((refusal?.errors || []).map((e) => [e.field, e.message]));
  const fieldOf = (id, field) => ({ ...invalid(id, said[field]) });

  const setRow = (i, key, value) => setRows((before) => before.map((r, n) => (n === i ? { ...r, [key]: value } : r)));
  function numberOrNull(text) {
    const t = String(text).trim();
    return t === "" ? null : (/^\d+$/.test(t) ? Number(t) : t); // what is no whole number goes as typed: the API says why
  }
  async function save(event) {
    event.preventDefault();
    setProblem("");
    const p = Number(places);
    if (!/^\d+$/.test(places) || p > 18) { setProblem("Decimal places: a whole number, 0 to 18."); return; }
    const amountThresholds = {};
    for (const row of rows) {
      const currency = row.currency.trim().toUpperCase();
      if (!currency) continue;
      const levels = {};
      for (const l of LEVELS) {
        if (!row[l].trim()) continue;
        const minor = minorUnits(row[l], p);
        if (minor === null || minor > BigInt(Number.MAX_SAFE_INTEGER)) {
          setProblem(`${currencyWords(currency)}, ${l}: type an amount with at most ${p} decimal places, such as 1,000.00.`);
          return;
        }
        levels[l] = Number(minor);
      }
      amountThresholds[currency] = levels;
    }
    const body = {
      amount_decimal_places: p, amount_thresholds: amountThresholds,
      age_thresholds: Object.fromEntries(LEVELS.map((l) => [l, numberOrNull(ages[l])]).filter(([, v]) => v !== null)),
      due_in_hours: Object.fromEntries(SEVERITIES.map((s) => [s, numberOrNull(due[s])])),
      expected_version: policy.version,
    };
    if (busy) return;
    setBusy(true);
    setRefusal(null);
    try {
      await api(path, { method: "PUT", body });
      onDone(true);
    } catch (failure) {
      setRefusal(failure);
      setBusy(false);
      setTimeout(() => document.getElementById("sla-refusal")?.focus(), 0);
    }
  }
  return html`
    <form class="settings-form sla-form" onSubmit=${save} aria-labelledby="sla-form-title" novalidate>
      <h3 id="sla-form-title">Edit the service levels</h3>
      <div class="field"><label for="sla-places">Decimal places of the amounts</label>
        <input id="sla-places" inputmode="numeric" size="3" value=${places} onInput=${(e) => setPlaces(e.currentTarget.value)}
          ...${fieldOf("sla-places", "amount_decimal_places")} />
        <${FieldError} id="sla-places" message=${said.amount_decimal_places} /></div>
      <fieldset><legend>Amount thresholds, per currency ("*": any other currency)</legend>
        ${rows.map((row, i) => html`<div class="sla-row" key=${i}>
          <label for=${`sla-currency-${i}`}>Currency</label>
          <input id=${`sla-currency-${i}`} size="4" value=${row.currency} onInput=${(e) => setRow(i, "currency", e.currentTarget.value)} />
          ${LEVELS.map((l) => html`<label for=${`sla-${i}-${l}`}>${l}</label>
            <input id=${`sla-${i}-${l}`} inputmode="decimal" size="12" value=${row[l]}
              aria-label=${`${currencyWords(row.currency || "new")} ${l} amount`}
              onInput=${(e) => setRow(i, l, e.currentTarget.value)}
              ...${fieldOf(`sla-${i}-${l}`, `amount_thresholds.${row.currency.trim().toUpperCase()}.${l}`)} />
            <${FieldError} id=${`sla-${i}-${l}`} message=${said[`amount_thresholds.${row.currency.trim().toUpperCase()}.${l}`]} />`)}
          <button type="button" class="secondary small" aria-label=${`Remove the ${currencyWords(row.currency || "new")} thresholds`}
            onClick=${() => setRows((before) => before.filter((_, n) => n !== i))}>Remove</button>
        </div>`)}
        <button type="button" class="secondary small" onClick=${() => setRows((before) => [...before, { currency: "", medium: "", high: "", critical: "" }])}>Add a currency</button>
      </fieldset>
      <fieldset><legend>Age thresholds (days)</legend>
        ${LEVELS.map((l) => html`<span class="field-inline"><label for=${`sla-age-${l}`}>${l} age</label>
          <input id=${`sla-age-${l}`} inputmode="numeric" size="5" value=${ages[l]} onInput=${(e) => setAges({ ...ages, [l]: e.currentTarget.value })}
            ...${fieldOf(`sla-age-${l}`, `age_thresholds.${l}`)} />
          <${FieldError} id=${`sla-age-${l}`} message=${said[`age_thresholds.${l}`]} /></span>`)}
      </fieldset>
      <fieldset><legend>Due after opening (hours)</legend>
        ${SEVERITIES.map((s) => html`<span class="field-inline"><label for=${`sla-due-${s}`}>${s} due</label>
          <input id=${`sla-due-${s}`} inputmode="numeric" size="5" value=${due[s]} onInput=${(e) => setDue({ ...due, [s]: e.currentTarget.value })}
            ...${fieldOf(`sla-due-${s}`, `due_in_hours.${s}`)} />
          <${FieldError} id=${`sla-due-${s}`} message=${said[`due_in_hours.${s}`]} /></span>`)}
      </fieldset>
      ${problem && html`<p class="error" role="alert">${problem}</p>`}
      ${refusal && html`<div id="sla-refusal" tabindex="-1"><${Problem} error=${refusal} what="save the service levels" /></div>`}
      <div class="actions">
        <button type="submit" aria-disabled=${busy ? "true" : undefined}>Save the service levels</button>
        <button type="button" class="secondary" onClick=${() => onDone(false)}>Cancel</button>
      </div>
    </form>`;
}

// A bucket's amounts, one line a currency (never one currency added to another).
function bucketMoney(amounts) {
  if (!amounts || !amounts.length) return "—";
  return amounts.map((m, i) => html`${i ? html`<br />` : ""}${money(m.amount, m.decimal_places, m.currency)}`);
}

function AgingSection({ reconciliation }) {
  const { error, data } = useApi(`reconciliations/${reconciliation.id}/service_levels/aging`);
  const to = (changes) => queueHash({ reconciliation_id: reconciliation.id, ...changes });
  // A count's link says what it counts ("2 exceptions, 7 to 30 days"), its visible number first.
  const cell = (n, changes, words) => (n ? html`<a href=${to(changes)}
    aria-label=${`${count(n)} exception${n === 1 ? "" : "s"}, ${words}`}>${count(n)}</a>` : "0");
  return html`
    <section aria-labelledby="aging-title" class="aging">
      <h2 id="aging-title">Aging of open exceptions</h2>
      <${Problem} error=${error} what="load the aging" />
      ${!data && !error && html`<p>Loading the aging…</p>`}
      ${data && html`
        <p data-testid="aging-summary">${count(data.count)} open or investigating exception${data.count === 1 ? "" : "s"},
          ${" "}${data.overdue ? html`<a href=${to({ due: "true" })}>${count(data.overdue)} overdue</a>` : "none overdue"}.</p>
        <table class="aging-buckets" data-testid="aging-buckets">
          <caption>By age (since the oldest record's date)</caption>
          <thead><tr><td></td>${AGES.map(([, words]) => html`<th scope="col" class="number">${words}</th>`)}</tr></thead>
          <tbody>
            <tr><th scope="row">Exceptions</th>${AGES.map(([bucket, words]) => html`<td class="number">${cell(data.by_age_bucket[bucket] || 0, { age: bucket }, words.toLowerCase())}</td>`)}</tr>
            <tr data-testid="aging-amounts"><th scope="row">Amount</th>${AGES.map(([bucket]) => html`<td class="number">${bucketMoney((data.amounts_by_age_bucket || {})[bucket])}</td>`)}</tr>
          </tbody>
        </table>
        ${data.unpriced ? html`<p data-testid="aging-unpriced">${count(data.unpriced)} exception${data.unpriced === 1 ? " has" : "s have"} no single currency (records in several, or the currency not recorded yet): counted above, in no amount.</p>` : ""}
        <table class="aging-severities" data-testid="aging-severities">
          <caption>By severity</caption>
          <thead><tr>${SEVERITIES.map((s) => html`<th scope="col" class="number">${s}</th>`)}</tr></thead>
          <tbody><tr>${SEVERITIES.map((s) => html`<td class="number">${cell(data.by_severity[s] || 0, { severity: s }, `${s} severity`)}</td>`)}</tr></tbody>
        </table>`}
    </section>`;
}

function teamWords(team, people) {
  if (team.role) return `every ${team.role}`;
  return team.user_ids.map((id) => (people.byId.has(id) ? personName(people.byId.get(id)) : `user ${id}`)).join(", ");
}

function RoutingSection({ reconciliation }) {
  const path = `reconciliations/${reconciliation.id}/routing_rules`;
  const { error, data, reload } = useApi(path);
  const people = usePeople();
  const streams = useAll("data_streams").data;
  const [editing, setEditing] = useState(null); // a rule, or {} for a new one
  const removal = useAction();
  const approver = can("approver");
  async function remove(rule) {
    const done = await removal.run(() => api(`${path}/${rule.id}`, { method: "DELETE" }), () => `Deleted the routing rule ${rule.name}.`);
    if (done !== undefined) reload();
    return true;
  }
  const rules = data ? data.data : [];
  return html`
    <section aria-labelledby="routing-title" class="routing-rules">
      <h2 id="routing-title">Exception routing</h2>
      <p class="muted">New exceptions go to the team of the first enabled rule that applies (lowest position first); none: they stay unassigned.</p>
      <${Problem} error=${error} what="load the routing rules" />
      ${data && !rules.length && html`<p data-testid="routing-empty">No routing rules: new exceptions stay unassigned.</p>`}
      ${rules.length > 0 && html`
        <table class="routing" data-testid="routing-rules">
          <caption class="visually-hidden">Routing rules, in the order they are tried</caption>
          <thead><tr><th scope="col" class="number">Position</th><th scope="col">Name</th><th scope="col">Strategy</th>
            <th scope="col">Team</th><th scope="col">Applies to</th><th scope="col">Enabled</th>
            ${approver && html`<th scope="col">Change</th>`}</tr></thead>
          <tbody>${rules.map((r) => html`<tr key=${r.id} data-rule-id=${r.id}>
            <td class="number">${r.position}</td><td>${r.name}</td><td>${STRATEGIES[r.strategy] || r.strategy}</td>
            <td>${teamWords(r.team, people)}</td>
            <td>${[r.data_stream_key ? `stream ${r.data_stream_key}` : "any stream", r.severity ? `${r.severity} severity` : "any severity"].join(", ")}</td>
            <td>${r.enabled ? "yes" : "no"}</td>
            ${approver && html`<td><div class="actions row-actions">
              <button type="button" class="secondary small" aria-label=${`Edit ${r.name}`}
                onClick=${() => { removal.clear(); setEditing(r); }}>Edit</button>
              <${Confirm} label="Delete" name=${`Delete ${r.name}`} question=${`Delete the routing rule ${r.name}?`}
                yes="Yes, delete" busy=${removal.busy} onYes=${() => remove(r)} /></div></td>`}
          </tr>`)}</tbody>
        </table>`}
      <${Outcome} action=${removal} />
      ${approver && !editing && html`<button type="button" class="secondary" onClick=${() => { removal.clear(); setEditing({}); }}>Add a routing rule</button>`}
      ${editing && html`<${RuleForm} key=${editing.id || "new"} path=${path} rule=${editing} people=${people}
        streams=${streams ? streams.data : []} next=${rules.length ? Math.max(...rules.map((r) => r.position)) + 1 : 0}
        onDone=${(saved) => { setEditing(null); if (saved) reload(); }} />`}
    </section>`;
}

// A rule's fields; POST for a new one, PATCH for one edited. What was typed is sent as typed (a number
// when it reads as one) and the API judges it: its refusal is shown in its own words.
function RuleForm({ path, rule, people, streams, next, onDone }) {
  const isNew = !rule.id;
  const [name, setName] = useState(rule.name || "");
  const [strategy, setStrategy] = useState(rule.strategy || "round_robin");
  const [teamKind, setTeamKind] = useState(rule.team && !rule.team.role ? "users" : "role");
  const [role, setRole] = useState(rule.team?.role || "preparer");
  const [users, setUsers] = useState(new Set(rule.team?.user_ids || []));
  const [position, setPosition] = useState(String(rule.position ?? next));
  const [stream, setStream] = useState(rule.data_stream_key || "");
  const [severity, setSeverity] = useState(rule.severity || "");
  const [enabled, setEnabled] = useState(rule.enabled ?? true);
  const [sent, setSent] = useState(null); // the refusal of the last try
  const [busy, setBusy] = useState(false);
  const title = isNew ? "Add a routing rule" : `Edit the routing rule ${rule.name}`;
  // The refusal's messages by the form's field ("team.user_ids" belongs to "team"), each under its field.
  const said = {};
  for (const e of sent?.errors || []) {
    const field = e.field.split(/[.[]/)[0];
    if (!said[field]) said[field] = e.message;
  }
  useEffect(() => { document.getElementById("routing-name")?.focus(); }, []);

  async function save(event) {
    event.preventDefault();
    if (busy) return;
    const body = {
      name, strategy, position: /^\d+$/.test(position.trim()) ? Number(position.trim()) : position,
      team: teamKind === "role" ? { role } : { user_ids: [...users] },
      data_stream_key: stream || null, severity: severity || null, enabled,
    };
    setBusy(true);
    setSent(null);
    try {
      await api(isNew ? path : `${path}/${rule.id}`, { method: isNew ? "POST" : "PATCH", body });
      onDone(true);
    } catch (failure) {
      setSent(failure);
      setBusy(false);
      setTimeout(() => document.getElementById("routing-refusal")?.focus(), 0);
    }
  }
  const toggle = (id, on) => setUsers((before) => {
    const nextSet = new Set(before);
    if (on) nextSet.add(id); else nextSet.delete(id);
    return nextSet;
  });
  return html`
    <form class="settings-form routing-form" onSubmit=${save} aria-labelledby="routing-form-title" novalidate>
      <h3 id="routing-form-title">${title}</h3>
      ${sent && html`<div id="routing-refusal" tabindex="-1"><${Problem} error=${sent} what=${isNew ? "add the routing rule" : "save the routing rule"} /></div>`}
      <div class="field"><label for="routing-name">Name</label>
        <input id="routing-name" value=${name} onInput=${(e) => setName(e.currentTarget.value)} ...${invalid("routing-name", said.name)} />
        <${FieldError} id="routing-name" message=${said.name} /></div>
      <div class="field"><label for="routing-strategy">Strategy</label>
        <select id="routing-strategy" value=${strategy} onChange=${(e) => setStrategy(e.currentTarget.value)}>
          ${Object.entries(STRATEGIES).map(([value, words]) => html`<option value=${value}>${words}</option>`)}
        </select></div>
      <fieldset aria-describedby=${said.team ? "routing-team-error" : undefined}><legend>Team</legend>
        <label class="choice"><input type="radio" name="routing-team" checked=${teamKind === "role"} onChange=${() => setTeamKind("role")} /> Everyone with a role</label>
        <label class="choice"><input type="radio" name="routing-team" checked=${teamKind === "users"} onChange=${() => setTeamKind("users")} /> Chosen people</label>
        ${teamKind === "role" ? html`<div class="field"><label for="routing-role">Role</label>
          <select id="routing-role" value=${role} onChange=${(e) => setRole(e.currentTarget.value)}>
            ${ROLES.map((r) => html`<option value=${r}>${r}</option>`)}
          </select></div>`
        : html`<div class="people-choice">${people.list.map((u) => html`<label class="choice" key=${u.id}>
            <input type="checkbox" checked=${users.has(u.id)} onChange=${(e) => toggle(u.id, e.currentTarget.checked)} /> ${personName(u)}</label>`)}</div>`}
        <${FieldError} id="routing-team" message=${said.team} />
      </fieldset>
      <div class="field"><label for="routing-position">Position</label>
        <input id="routing-position" inputmode="numeric" size="5" value=${position} onInput=${(e) => setPosition(e.currentTarget.value)}
          ...${invalid("routing-position", said.position)} />
        <${FieldError} id="routing-position" message=${said.position} /></div>
      <div class="field"><label for="routing-stream">Only the stream</label>
        <select id="routing-stream" value=${stream} onChange=${(e) => setStream(e.currentTarget.value)}>
          <option value="">Any stream</option>
          ${streams.map((s) => html`<option value=${s.key}>${s.name}</option>`)}
          ${stream && !streams.some((s) => s.key === stream) && html`<option value=${stream}>${stream}</option>`}
        </select></div>
      <div class="field"><label for="routing-severity">Only the severity</label>
        <select id="routing-severity" value=${severity} onChange=${(e) => setSeverity(e.currentTarget.value)}>
          <option value="">Any severity</option>
          ${SEVERITIES.map((s) => html`<option value=${s}>${s}</option>`)}
        </select></div>
      <label class="choice"><input type="checkbox" checked=${enabled} onChange=${(e) => setEnabled(e.currentTarget.checked)} /> Enabled</label>
      <div class="actions">
        <button type="submit" aria-disabled=${busy ? "true" : undefined}>${isNew ? "Add the rule" : "Save the rule"}</button>
        <button type="button" class="secondary" onClick=${() => onDone(false)}>Cancel</button>
      </div>
    </form>`;
}
