// A reconciliation's rules (reconciliations.js shows them): by priority; admins edit, add, delete and
// reorder them; preparers dry run one rule, or every active rule in priority order.
import { useState } from "preact/hooks";
import { api, can, html } from "./api.js";
import { DryRunNearMisses } from "./near-misses.js";
import { SuggestionsSection } from "./rule-suggestions.js";
import { Confirm, FieldError, invalid, Problem, Status, useApi, useMounted } from "./ui.js";

const FIELDS = ["amount", "date", "direction", "currency", "description", "external_id"];
const TEXT_OPERATORS = ["equals", "contains", "similar"];
const OPERATORS = { amount: ["equals", "within"], date: ["equals", "within"], direction: ["equals", "opposite"], currency: ["equals"] };
const NORMALIZATIONS = ["case", "whitespace", "punctuation", "leading_zeros"];
const CARDINALITIES = ["one_to_one", "one_to_many", "many_to_one", "many_to_many"];
const MAX_PRIORITY = 1000000;

const isText = (field) => field === "description" || field === "external_id" || field.startsWith("metadata.");
const operatorsOf = (field) => OPERATORS[field] || (isText(field) ? TEXT_OPERATORS : ["equals", "within", "contains", "similar", "opposite"]);

// A condition as the API gives it, shortly: "amount within 5 (minor units)", "description similar ≥ 0.85".
export function describeCondition(c) {
  let text = `${c.field}${c.side_b_field && c.side_b_field !== c.field ? ` ↔ ${c.side_b_field}` : ""} ${c.operator}`;
  if (c.tolerance !== undefined && c.tolerance !== null) text += ` ${c.tolerance} minor units`;
  if (c.tolerance_percent !== undefined && c.tolerance_percent !== null) text += ` ${c.tolerance_percent}%`;
  if (c.days !== undefined && c.days !== null) text += ` ${c.days} days`;
  if (c.threshold !== undefined && c.threshold !== null) text += ` ≥ ${c.threshold}`;
  if (c.normalize && c.normalize.length) text += ` (ignoring ${c.normalize.join(", ")})`;
  return text;
}

export function RulesSection({ reconciliation }) {
  const { loading, error, data, reload } = useApi(`reconciliations/${reconciliation.id}/rules`);
  const [editing, setEditing] = useState(null); // a rule's id, "new", or null
  const [dryRuns, setDryRuns] = useState({}); // rule id -> {result} | {error} | {busy}
  const [all, setAll] = useState(null); // the whole rule set's dry run: [{rule, result | error}]
  const [status, setStatus] = useState("");
  const [problem, setProblem] = useState(null);
  const [busy, setBusy] = useState(false);
  const mounted = useMounted();
  const admin = can("admin");
  const preparer = can("preparer");
  const rules = data ? [...data.data].sort((x, y) => x.priority - y.priority) : [];

  async function dryRun(rule) {
    if (dryRuns[rule.id]?.busy) return;
    setDryRuns((before) => ({ ...before, [rule.id]: { busy: true } }));
    try {
      const result = await api(`reconciliation_rules/${rule.id}/dry_run`, { method: "POST" });
      setDryRuns((before) => ({ ...before, [rule.id]: { result } }));
      setStatus(`Dry run of “${rule.name}”: ${result.matches} matches, ${result.matched_records} records.`);
    } catch (failure) {
      setDryRuns((before) => ({ ...before, [rule.id]: { error: failure } }));
    }
  }

  // Each active rule's dry run counts what the rules before it take first, so the rows add up to what
  // a run of the whole set would match. One request a rule, in priority order.
  async function dryRunAll() {
    if (all?.busy) return;
    const active = rules.filter((r) => r.active);
    setAll({ busy: true, rows: [] });
    const rows = [];
    for (const rule of active) {
      if (!mounted.current) return; // the person left: the rest is not asked for
      try {
        rows.push({ rule, result: await api(`reconciliation_rules/${rule.id}/dry_run`, { method: "POST" }) });
      } catch (failure) {
        rows.push({ rule, error: failure });
      }
      setAll({ busy: true, rows: [...rows] });
    }
    setAll({ busy: false, rows });
    const total = rows.reduce((sum, row) => sum + (row.result ? row.result.matched_records : 0), 0);
    setStatus(`Dry run of ${rows.length} active rules: ${total} records would match.`);
  }

  // Priorities are unique within a reconciliation: a swap parks one rule on a free priority first
  // (three PATCHes). Should one fail, what the earlier ones changed is put back, last first, and the
  // page says in what order the rules are left.
  async function move(index, step) {
    const rule = rules[index];
    const other = rules[index + step];
    if (!other || busy) return;
    const used = new Set(rules.map((r) => r.priority));
    let parked = Math.max(...used) + 1;
    if (parked > MAX_PRIORITY) { parked = 1; while (used.has(parked)) parked += 1; }
    setBusy(true);
    setProblem(null);
    const priority = (r, value) => api(`reconciliation_rules/${r.id}`, { method: "PATCH", body: { priority: value } });
    const done = []; // [rule, its priority before] of each PATCH that went through
    try {
      for (const [r, value] of [[rule, parked], [other, rule.priority], [rule, other.priority]]) {
        const before = done.some(([d]) => d.id === r.id) ? parked : r.priority;
        await priority(r, value);
        done.push([r, before]);
      }
      setStatus(`Moved “${rule.name}” ${step < 0 ? "up" : "down"}: it now runs ${step < 0 ? "before" : "after"} “${other.name}”.`);
    } catch (failure) {
      let left = "nothing had changed: the rules are in their former order";
      if (done.length) {
        try {
          for (const [r, before] of [...done].reverse()) await priority(r, before);
          left = "what had changed is put back: the rules are in their former order";
        } catch (again) {
          left = `putting it back failed too (${again.message}): the rules are as listed below, read again`;
        }
      }
      setProblem({ error: new Error(`${failure.message}; ${left}`), what: `move “${rule.name}”` });
    } finally {
      setBusy(false);
      reload();
    }
  }

  async function remove(rule) {
    if (busy) return false;
    setBusy(true);
    setProblem(null);
    try {
      await api(`reconciliation_rules/${rule.id}`, { method: "DELETE" });
      setStatus(`Deleted the rule “${rule.name}”.`);
      return true;
    } catch (failure) {
      setProblem({ error: failure, what: "delete the rule" });
      return false;
    } finally {
      setBusy(false);
      reload();
    }
  }

  // Closing the form puts the focus back on the section's heading, not on the page's start.
  function close() {
    setEditing(null);
    setTimeout(() => document.getElementById("rules-title")?.focus(), 0);
  }

  function saved(rule, created) {
    close();
    setStatus(`${created ? "Added" : "Saved"} the rule “${rule.name}”.`);
    reload();
  }

  return html`
    <section aria-labelledby="rules-title" class="rules">
      <h2 id="rules-title" tabindex="-1">Rules</h2>
      <p class="hint">Runs apply the active rules by priority, lowest first; each takes the records the rules before it left open.</p>
      <${Problem} error=${error} what="load the rules" />
      ${loading && !data && html`<p>Loading rules…</p>`}
      ${data && !rules.length && html`<p>No rules yet: a run matches nothing.</p>`}
      ${rules.length > 0 && html`
        <ol class="rule-list">
          ${rules.map((rule, index) => html`
            <li class="rule" key=${rule.id} data-rule-id=${rule.id} aria-labelledby=${`rule-heading-${rule.id}`}>
              <h3 id=${`rule-heading-${rule.id}`}>${rule.name}</h3>
              <p class="rule-facts">${`Priority ${rule.priority} · ${rule.cardinality} · ${rule.auto_confirm
                ? "confirms its matches" : "proposes its matches"} · ${rule.status || (rule.active ? "active" : "inactive")}`}
                ${rule.source === "learned" && html` <span class="badge learned">learned from decisions</span>`}</p>
              <ul class="conditions">
                ${rule.conditions.map((c) => html`<li>${describeCondition(c)}</li>`)}
              </ul>
              ${rule.conversion && html`<p class="rule-conversion">${`Converts side ${rule.conversion.side === "side_b" ? "B" : "A"} into `
                + `${rule.conversion.to_currency} at the rates of “${rule.conversion.rate_stream_key}” (at most `
                + `${rule.conversion.max_days_back ?? 7} days back) before comparing`}</p>`}
              ${rule.allocation === "partial" && html`<p class="rule-allocation">Allocates in part: a record may be paid by several matches.</p>`}
              ${(rule.group_by.side_a || []).length + (rule.group_by.side_b || []).length > 0 && html`
                <p>Grouped by: side A ${(rule.group_by.side_a || []).join(", ") || "—"}; side B ${(rule.group_by.side_b || []).join(", ") || "—"}</p>`}
              <div class="actions">
                ${preparer && html`<button type="button" class="secondary" onClick=${() => dryRun(rule)}
                  aria-label=${`Dry run ${rule.name}`} aria-disabled=${dryRuns[rule.id]?.busy ? "true" : undefined}>Dry run</button>`}
                ${admin && html`
                  <button type="button" class="secondary" onClick=${() => setEditing(rule.id)} aria-label=${`Edit ${rule.name}`}>Edit</button>
                  <button type="button" class="secondary" onClick=${() => move(index, -1)}
                    aria-disabled=${index === 0 || busy ? "true" : undefined} aria-label=${`Move up ${rule.name}`}>Move up</button>
                  <button type="button" class="secondary" onClick=${() => move(index, 1)}
                    aria-disabled=${index === rules.length - 1 || busy ? "true" : undefined} aria-label=${`Move down ${rule.name}`}>Move down</button>
                  <${Confirm} label="Delete" name=${`Delete ${rule.name}`} question=${`Delete the rule “${rule.name}”?`}
                    yes="Yes, delete" busy=${busy} onYes=${() => remove(rule)} />`}
              </div>
              ${editing === rule.id && html`<${RuleForm} rule=${rule} reconciliationId=${reconciliation.id}
                onSaved=${(r) => saved(r, false)} onCancel=${close} />`}
              ${dryRuns[rule.id] && html`<${DryRunResult} rule=${rule} state=${dryRuns[rule.id]} />`}
            </li>`)}
        </ol>`}
      <div class="actions">
        ${preparer && rules.some((r) => r.active) && html`<button type="button" class="secondary" onClick=${dryRunAll}
          aria-disabled=${all?.busy ? "true" : undefined}>Dry run all rules</button>`}
        ${admin && data && editing !== "new" && html`<button type="button" onClick=${() => setEditing("new")}>Add rule</button>`}
      </div>
      ${problem && html`<${Problem} error=${problem.error} what=${problem.what} />`}
      ${editing === "new" && html`<${RuleForm} reconciliationId=${reconciliation.id}
        nextPriority=${rules.length ? Math.min(MAX_PRIORITY, rules[rules.length - 1].priority + 1) : 1}
        onSaved=${(r) => saved(r, true)} onCancel=${close} />`}
      ${all && html`<${DryRunAll} all=${all} />`}
      <${Status} text=${status} />
      <${SuggestionsSection} reconciliation=${reconciliation} onAccepted=${reload} />
    </section>`;
}

function DryRunAll({ all }) {
  const total = (key) => all.rows.reduce((sum, row) => sum + (row.result ? row.result[key] : 0), 0);
  return html`
    <div class="dry-run-all" aria-busy=${all.busy ? "true" : "false"}>
      <h3>Dry run of the rule set</h3>
      <table>
        <caption class="visually-hidden">What each active rule would match, in priority order</caption>
        <thead><tr><th scope="col">Rule</th><th scope="col" class="number">Matches</th><th scope="col" class="number">Proposed</th>
          <th scope="col" class="number">Records matched</th><th scope="col" class="number">Taken by earlier rules</th></tr></thead>
        <tbody>
          ${all.rows.map((row) => (row.result ? html`<tr>
              <td>${row.rule.name}</td><td class="number">${row.result.matches}</td><td class="number">${row.result.proposed}</td>
              <td class="number">${row.result.matched_records}</td><td class="number">${row.result.taken_by_earlier_rules}</td></tr>`
            : html`<tr><td>${row.rule.name}</td><td colspan="4" class="error">Could not dry run: ${row.error.message}</td></tr>`))}
        </tbody>
        ${!all.busy && html`<tfoot><tr><th scope="row">All rules</th><td class="number">${total("matches")}</td>
          <td class="number">${total("proposed")}</td><td class="number">${total("matched_records")}</td><td></td></tr></tfoot>`}
      </table>
      ${all.busy && html`<p>Dry running rule ${all.rows.length + 1}…</p>`}
    </div>`;
}

export function DryRunResult({ rule, state }) {
  if (state.busy) return html`<p class="dry-run">Dry running “${rule.name}”…</p>`;
  if (state.error) return html`<${Problem} error=${state.error} what=${`dry run “${rule.name}”`} />`;
  const r = state.result;
  return html`
    <div class="dry-run" data-testid=${`dry-run-${rule.id}`}>
      <h4>Dry run: what “${rule.name}” would match now (nothing written)</h4>
      <dl class="facts">
        <dt>Open records</dt><dd>side A ${r.open_records.side_a}, side B ${r.open_records.side_b}</dd>
        <dt>Taken by earlier rules</dt><dd data-count="taken_by_earlier_rules">${r.taken_by_earlier_rules}</dd>
        <dt>Matches</dt><dd data-count="matches">${r.matches}</dd>
        <dt>Of them proposed</dt><dd>${r.proposed}</dd>
        <dt>Records matched</dt><dd data-count="matched_records">${r.matched_records}</dd>
      </dl>
      ${r.excluded_by_condition && html`
        <table class="excluded">
          <caption>Candidate pairs each condition alone turned away</caption>
          <thead><tr><th scope="col">Condition</th><th scope="col" class="number">Pairs turned away</th></tr></thead>
          <tbody>${r.excluded_by_condition.map((e) => html`<tr><td>${e.condition + 1}. ${e.field} ${e.operator}</td>
            <td class="number">${e.excluded_pairs === null ? "not counted" : e.excluded_pairs}</td></tr>`)}</tbody>
        </table>`}
      ${r.sample.length > 0 ? html`
        <table class="sample">
          <caption>A sample of ${r.sample.length} of the ${r.matches} matches</caption>
          <thead><tr><th scope="col">Status</th><th scope="col">Side A records</th><th scope="col">Side B records</th>
            <th scope="col">Differences</th></tr></thead>
          <tbody>${r.sample.map((m) => html`<tr><td>${m.status}</td><td>${m.side_a_record_ids.join(", ")}</td>
            <td>${m.side_b_record_ids.join(", ")}</td>
            <td>${Object.entries(m.differences || {}).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join("; ") || "none"}</td></tr>`)}
          </tbody>
        </table>` : html`<p>No match in the sample.</p>`}
      <${DryRunNearMisses} nearMisses=${r.near_misses} rule=${rule} />
    </div>`;
}

// The form's state: text as typed, so the API judges what it is (and says so in its 422).
function formOf(rule, nextPriority) {
  const text = (v) => (v === undefined || v === null ? "" : String(v));
  return {
    name: rule ? rule.name : "",
    priority: text(rule ? rule.priority : nextPriority),
    cardinality: rule ? rule.cardinality : "one_to_one",
    auto_confirm: rule ? rule.auto_confirm : true,
    active: rule ? rule.active : true,
    group_a: rule ? (rule.group_by.side_a || []).join(", ") : "",
    group_b: rule ? (rule.group_by.side_b || []).join(", ") : "",
    conditions: (rule ? rule.conditions : [{ field: "amount", operator: "equals" }]).map((c) => ({
      field: c.field, operator: c.operator, side_b_field: text(c.side_b_field === c.field ? "" : c.side_b_field),
      tolerance: text(c.tolerance), tolerance_percent: text(c.tolerance_percent), days: text(c.days),
      threshold: text(c.threshold), normalize: [...(c.normalize || [])],
    })),
  };
}

// A number when the text is one; otherwise the text itself, which the API refuses with its reason.
const number = (t) => (/^\s*-?\d+(\.\d+)?\s*$/.test(t) ? Number(t) : t);
const list = (t) => t.split(",").map((s) => s.trim()).filter(Boolean);

function bodyOf(form) {
  return {
    name: form.name,
    priority: number(form.priority),
    cardinality: form.cardinality,
    auto_confirm: form.auto_confirm,
    active: form.active,
    group_by: { side_a: list(form.group_a), side_b: list(form.group_b) },
    conditions: form.conditions.map((c) => {
      const out = { field: c.field.trim(), operator: c.operator };
      if (c.side_b_field.trim()) out.side_b_field = c.side_b_field.trim();
      for (const p of parametersOf(c)) if (c[p].trim() !== "") out[p] = number(c[p]);
      if (isText(out.field) && c.normalize.length) out.normalize = c.normalize;
      return out;
    }),
  };
}

// What the page refuses before sending: a tolerance in minor units past 2^53 would be rounded by
// Number() (a JSON number), so the service would get another amount than the one typed.
function refusedHere(form) {
  const errors = [];
  form.conditions.forEach((c, i) => {
    if (!parametersOf(c).includes("tolerance")) return;
    const text = c.tolerance.trim();
    if (/^-?\d+(\.\d+)?$/.test(text) && !Number.isSafeInteger(Number(text.split(".")[0]))) {
      errors.push({ field: `conditions[${i}].tolerance`,
        message: `is too large to send exactly: at most ${Number.MAX_SAFE_INTEGER} minor units` });
    }
  });
  return errors;
}

function parametersOf(c) {
  if (c.field === "amount" && c.operator === "within") return ["tolerance", "tolerance_percent"];
  if (c.field === "date" && c.operator === "within") return ["days"];
  if (c.operator === "similar") return ["threshold"];
  return [];
}

const PARAMETER_LABELS = { tolerance: "Tolerance (minor units)", tolerance_percent: "Tolerance (% of side A)",
  days: "Days apart at most", threshold: "Similarity at least (0 to 1)" };

// "conditions[1].days" -> "rule-7-conditions-1-days": where an error of the API is shown.
const idOf = (prefix, path) => `${prefix}-${path.replace(/\[(\d+)\]/g, "-$1").replace(/\./g, "-")}`;

function RuleForm({ rule, reconciliationId, nextPriority, onSaved, onCancel }) {
  const [form, setForm] = useState(() => formOf(rule, nextPriority));
  const [errors, setErrors] = useState([]);
  const [failure, setFailure] = useState(null);
  const [busy, setBusy] = useState(false);
  const prefix = `rule-form-${rule ? rule.id : "new"}`;
  const title = rule ? `Edit “${rule.name}”` : "New rule";

  const set = (key, value) => setForm((f) => ({ ...f, [key]: value }));
  const setCondition = (i, key, value) => setForm((f) => ({
    ...f, conditions: f.conditions.map((c, j) => (j === i ? { ...c, [key]: value } : c)) }));
  const errorsAt = (path, loose = false) => errors.filter((e) => e.field === path
    || (loose && (e.field.startsWith(`${path}[`) || e.field.startsWith(`${path}.`))));

  // An input with its label and the API's message for it (aria-invalid, aria-describedby).
  function field(path, label, children, loose = false) {
    const id = idOf(prefix, path);
    const message = errorsAt(path, loose).map((e) => e.message).join("; ");
    return html`
      <div class=${`field${message ? " invalid" : ""}`}>
        <label for=${id}>${label}</label>
        ${children({ id, ...invalid(id, message) })}
        <${FieldError} id=${id} message=${message} />
      </div>`;
  }

  async function submit(event) {
    event.preventDefault();
    if (busy) return;
    const refused = refusedHere(form);
    if (refused.length) {
      setFailure(new Error("a value is out of range"));
      setErrors(refused);
      setTimeout(() => document.getElementById(`${prefix}-errors`)?.focus(), 0);
      return;
    }
    setBusy(true);
    setErrors([]);
    setFailure(null);
    try {
      const saved = rule
        ? await api(`reconciliation_rules/${rule.id}`, { method: "PATCH", body: bodyOf(form) })
        : await api(`reconciliations/${reconciliationId}/rules`, { method: "POST", body: bodyOf(form) });
      onSaved(saved);
    } catch (problem) {
      setFailure(problem);
      setErrors(problem.errors || []);
      // The summary takes the focus, so the person hears what to fix.
      setTimeout(() => document.getElementById(`${prefix}-errors`)?.focus(), 0);
    } finally {
      setBusy(false);
    }
  }

  return html`
    <form class="rule-form card" onSubmit=${submit} aria-labelledby=${`${prefix}-title`} novalidate>
      <h4 id=${`${prefix}-title`}>${title}</h4>
      ${failure && html`
        <div id=${`${prefix}-errors`} class="error-summary" role="alert" tabindex="-1">
          <p>The rule was not saved: ${failure.message}</p>
          ${errors.length > 0 && html`<ul>${errors.map((e) => html`<li><a href=${`#${idOf(prefix, e.field)}`}
            onClick=${(ev) => { ev.preventDefault(); document.getElementById(idOf(prefix, e.field))?.focus(); }}>${e.field}</a>: ${e.message}</li>`)}</ul>`}
        </div>`}
      ${field("name", "Rule name", (a) => html`<input ...${a} value=${form.name} onInput=${(e) => set("name", e.currentTarget.value)} />`)}
      ${field("priority", "Priority (lower runs first)", (a) => html`<input ...${a} inputmode="numeric" value=${form.priority}
        onInput=${(e) => set("priority", e.currentTarget.value)} />`)}
      ${field("cardinality", "Cardinality", (a) => html`<select ...${a} value=${form.cardinality}
        onChange=${(e) => set("cardinality", e.currentTarget.value)}>${CARDINALITIES.map((c) => html`<option value=${c}>${c}</option>`)}</select>`)}
      ${field("group_by.side_a", "Group side A by (fields, comma separated)", (a) => html`<input ...${a} value=${form.group_a}
        onInput=${(e) => set("group_a", e.currentTarget.value)} />`, true)}
      ${field("group_by.side_b", "Group side B by (fields, comma separated)", (a) => html`<input ...${a} value=${form.group_b}
        onInput=${(e) => set("group_b", e.currentTarget.value)} />`, true)}
      <div class="checks">
        <label><input type="checkbox" checked=${form.auto_confirm} onChange=${(e) => set("auto_confirm", e.currentTarget.checked)} />
          Confirm its matches (unticked: they are proposed for an approver)</label>
        <label><input type="checkbox" checked=${form.active} onChange=${(e) => set("active", e.currentTarget.checked)} /> Active</label>
      </div>
      <fieldset class="conditions-editor">
        <legend>Conditions (all must hold)</legend>
        ${errorsAt("conditions").map((e) => html`<p class="field-error" id=${idOf(prefix, "conditions")} tabindex="-1">${e.message}</p>`)}
        ${form.conditions.map((c, i) => html`
          <fieldset class="condition" id=${idOf(prefix, `conditions[${i}]`)} tabindex="-1">
            <legend>Condition ${i + 1}</legend>
            ${errorsAt(`conditions[${i}]`).map((e) => html`<p class="field-error">${e.message}</p>`)}
            ${field(`conditions[${i}].field`, "Field", (a) => html`<input ...${a} list=${`${prefix}-fields`} value=${c.field}
              onInput=${(e) => setCondition(i, "field", e.currentTarget.value)} />`)}
            ${field(`conditions[${i}].operator`, "Operator", (a) => html`<select ...${a} value=${c.operator}
              onChange=${(e) => setCondition(i, "operator", e.currentTarget.value)}>
              ${[...new Set([...operatorsOf(c.field.trim()), c.operator])].map((o) => html`<option value=${o}>${o}</option>`)}</select>`)}
            ${field(`conditions[${i}].side_b_field`, "Side B field (if named differently)", (a) => html`<input ...${a}
              list=${`${prefix}-fields`} value=${c.side_b_field} onInput=${(e) => setCondition(i, "side_b_field", e.currentTarget.value)} />`)}
            ${parametersOf(c).map((p) => field(`conditions[${i}].${p}`, PARAMETER_LABELS[p], (a) => html`<input ...${a}
              inputmode="decimal" value=${c[p]} onInput=${(e) => setCondition(i, p, e.currentTarget.value)} />`))}
            ${isText(c.field.trim()) && html`
              <fieldset class="normalize" id=${idOf(prefix, `conditions[${i}].normalize`)}>
                <legend>Ignore</legend>
                ${NORMALIZATIONS.map((n) => html`<label><input type="checkbox" checked=${c.normalize.includes(n)}
                  onChange=${(e) => setCondition(i, "normalize", e.currentTarget.checked ? [...c.normalize, n] : c.normalize.filter((x) => x !== n))} /> ${n.replace("_", " ")}</label>`)}
                ${errorsAt(`conditions[${i}].normalize`, true).map((e) => html`<p class="field-error">${e.message}</p>`)}
              </fieldset>`}
            <button type="button" class="secondary" onClick=${() => set("conditions", form.conditions.filter((_, j) => j !== i))}
              aria-label=${`Remove condition ${i + 1}`}>Remove condition</button>
          </fieldset>`)}
        <button type="button" class="secondary" onClick=${() => set("conditions", [...form.conditions,
          { field: "date", operator: "equals", side_b_field: "", tolerance: "", tolerance_percent: "", days: "", threshold: "", normalize: [] }])}>Add condition</button>
      </fieldset>
      <datalist id=${`${prefix}-fields`}>${FIELDS.map((f) => html`<option value=${f} />`)}<option value="metadata." /></datalist>
      <div class="actions">
        <button type="submit" aria-disabled=${busy ? "true" : undefined}>${rule ? "Save rule" : "Add the rule"}</button>
        <button type="button" class="secondary" onClick=${onCancel}>Cancel</button>
      </div>
    </form>`;
}
