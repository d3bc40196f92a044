// A reconciliation's sign-off controls, on its page (#/reconciliations/<id>): its approval policy (which
// actions above which amount wait for a second person: read by all, set by admins; docs/approvals.md)
// and its period closes (an approver closes a period with a note, an admin reopens one with a reason,
// anyone exports a close's report; docs/period-close.md). The API checks every role again.
import { useEffect, useState } from "preact/hooks";
import { api, can, html, minorUnits, money, query } from "./api.js";
import { ACTION_WORDS, usePeople } from "./approvals.js";
import { ExportButton } from "./export.js";
import { Confirm, FieldError, invalid, Money, Outcome, Pager, placeErrors, Problem, plural, Status, useAction, useApi,
  usePaging, When } from "./ui.js";

const ACTIONS = ["manual_match", "unmatch", "dismissal", "accept_investigation"];

function minutesInWords(minutes) {
  const m = Number(minutes);
  if (m % 1440 === 0) return plural(m / 1440, "day");
  if (m % 60 === 0) return plural(m / 60, "hour");
  return plural(m, "minute");
}

// The policy's thresholds in words: the one threshold of every currency ("*"), and those named per
// currency when the service keeps them (a currency with none waits whatever its amount).
function thresholdWords(policy) {
  const places = policy.threshold_decimal_places;
  const named = Object.entries(policy.thresholds || {}).filter(([currency]) => currency !== "*");
  const any = policy.threshold === null || policy.threshold === undefined
    ? "any amount" : html`an amount above <${Money} amount=${policy.threshold} places=${places} />`;
  if (!named.length) return html`<span>${any} (in the records' own currency)</span>`;
  return html`<span>${named.map(([currency, value], n) => html`${n ? "; " : ""}above <${Money} amount=${value} places=${places}
    currency=${currency} />`)}; ${any} in any other currency</span>`;
}

// Both sections, the people who closed, reopened or set the policy named from one read of the users.
export function SignOffSections({ reconciliation }) {
  const who = usePeople();
  return html`<${ApprovalPolicySection} reconciliation=${reconciliation} who=${who} />
    <${PeriodClosesSection} reconciliation=${reconciliation} who=${who} />`;
}

function ApprovalPolicySection({ reconciliation, who }) {
  const path = `reconciliations/${reconciliation.id}/approval_policy`;
  const { error, data, reload } = useApi(path);
  const [editing, setEditing] = useState(false);
  const admin = can("admin");
  return html`
    <section aria-labelledby="policy-title" class="approval-policy">
      <h2 id="policy-title">Approval policy</h2>
      <${Problem} error=${error} what="load the approval policy" />
      ${!data && !error && html`<p>Loading the approval policy…</p>`}
      ${data && !editing && html`
        ${data.actions.length === 0
          ? html`<p data-testid="policy-summary">No action waits for a second person: every action is done when asked.</p>`
          : html`<p data-testid="policy-summary">These actions wait for an approver other than the person who asked,
              for ${thresholdWords(data)}:</p>
            <ul class="policy-actions">${data.actions.map((a) => html`<li key=${a}>${ACTION_WORDS[a] || a}</li>`)}</ul>
            <p>Unanswered, a request expires after ${minutesInWords(data.expires_after_minutes)}.</p>`}
        ${data.updated_at && html`<p class="muted">Set by ${who(data.updated_by)}, <${When} iso=${data.updated_at} />.</p>`}
        <p><a href=${`#/approvals${query({ reconciliation_id: reconciliation.id, status: "pending" })}`}>Pending approvals of this reconciliation</a></p>
        ${admin && html`<button type="button" class="secondary" onClick=${() => setEditing(true)}>Edit the approval policy</button>`}`}
      ${data && editing && html`<${PolicyForm} path=${path} policy=${data}
        onDone=${(saved) => { setEditing(false); if (saved) reload(); }} />`}
    </section>`;
}

const POLICY_FIELDS = ["actions", "threshold", "thresholds", "threshold_decimal_places", "expires_after_minutes"];

function PolicyForm({ path, policy, onDone }) {
  const places = policy.threshold_decimal_places ?? 2;
  const [actions, setActions] = useState(new Set(policy.actions));
  const [threshold, setThreshold] = useState(policy.threshold === null || policy.threshold === undefined ? "" : money(policy.threshold, places));
  const [decimalPlaces, setDecimalPlaces] = useState(String(places));
  const [expires, setExpires] = useState(String(policy.expires_after_minutes));
  const [errors, setErrors] = useState({});
  const action = useAction(POLICY_FIELDS);
  const shown = { ...action.errors, ...errors };
  useEffect(() => { document.getElementById("policy-threshold")?.focus(); }, []);

  async function save(event) {
    event.preventDefault();
    const typedPlaces = Number(decimalPlaces);
    const found = {};
    if (!/^\d+$/.test(decimalPlaces) || typedPlaces > 18) found.threshold_decimal_places = "a whole number, 0 to 18";
    const named = Object.entries(policy.thresholds || {}).filter(([c]) => c !== "*");
    const none = named.length > 0 && !threshold.trim(); // the named currencies' only: any other waits at any amount
    const minor = none ? 0n : minorUnits(threshold, Number.isInteger(typedPlaces) ? typedPlaces : 2);
    if (minor === null) found.threshold = `an amount with at most ${decimalPlaces} decimal places, such as 1,000.00`;
    else if (minor > BigInt(Number.MAX_SAFE_INTEGER)) found.threshold = "too large an amount";
    if (!/^\d+$/.test(expires)) found.expires_after_minutes = "a whole number of minutes";
    setErrors(found);
    if (Object.keys(found).length) {
      document.getElementById(`policy-${Object.keys(found)[0].replaceAll("_", "-")}`)?.focus();
      return;
    }
    const body = { actions: ACTIONS.filter((a) => actions.has(a)), threshold: Number(minor),
      threshold_decimal_places: typedPlaces, expires_after_minutes: Number(expires) };
    // A service that keeps thresholds per currency: the named ones are kept as they are, the typed one
    // is every other currency's (none typed: those wait whatever their amount).
    if (named.length) {
      delete body.threshold;
      body.thresholds = { ...Object.fromEntries(named), ...(none ? {} : { "*": Number(minor) }) };
    }
    const saved = await action.run(() => api(path, { method: "PUT", body }));
    if (saved) onDone(true);
  }

  const toggle = (a, on) => setActions((before) => {
    const next = new Set(before);
    if (on) next.add(a); else next.delete(a);
    return next;
  });
  const named = Object.entries(policy.thresholds || {}).filter(([c]) => c !== "*");
  return html`
    <form class="settings-form policy-form" onSubmit=${save} aria-labelledby="policy-form-title" novalidate>
      <h3 id="policy-form-title">Edit the approval policy</h3>
      <fieldset class=${shown.actions ? "invalid" : undefined} aria-describedby=${shown.actions ? "policy-actions-error" : undefined}>
        <legend>Actions that wait for a second person</legend>
        ${ACTIONS.map((a) => html`<label class="choice" key=${a}><input type="checkbox" checked=${actions.has(a)}
          onChange=${(e) => toggle(a, e.currentTarget.checked)} /> ${ACTION_WORDS[a]}</label>`)}
        <${FieldError} id="policy-actions" message=${shown.actions} />
      </fieldset>
      <div class="fields">
        <div>
          <label for="policy-threshold">Threshold</label>
          <input id="policy-threshold" inputmode="decimal" value=${threshold} aria-describedby="policy-threshold-hint"
            ...${shown.threshold || shown.thresholds ? { "aria-invalid": "true", "aria-describedby": "policy-threshold-hint policy-threshold-error" } : {}}
            onInput=${(e) => { setThreshold(e.currentTarget.value); action.edited(); }} />
          <p class="muted" id="policy-threshold-hint">An action whose amount is above it waits (in the records' own
            currency${named.length ? `; ${named.map(([c]) => c).join(", ")} keep their own, and empty here: any other currency waits at any amount` : ""}). 0: every amount.</p>
          <${FieldError} id="policy-threshold" message=${shown.threshold || shown.thresholds} />
        </div>
        <div>
          <label for="policy-threshold-decimal-places">Decimal places of the threshold</label>
          <input id="policy-threshold-decimal-places" inputmode="numeric" value=${decimalPlaces}
            ...${invalid("policy-threshold-decimal-places", shown.threshold_decimal_places)}
            onInput=${(e) => { setDecimalPlaces(e.currentTarget.value); action.edited(); }} />
          <${FieldError} id="policy-threshold-decimal-places" message=${shown.threshold_decimal_places} />
        </div>
        <div>
          <label for="policy-expires-after-minutes">Expires after (minutes)</label>
          <input id="policy-expires-after-minutes" inputmode="numeric" value=${expires}
            ...${invalid("policy-expires-after-minutes", shown.expires_after_minutes)}
            onInput=${(e) => { setExpires(e.currentTarget.value); action.edited(); }} />
          <${FieldError} id="policy-expires-after-minutes" message=${shown.expires_after_minutes} />
        </div>
      </div>
      <${Outcome} action=${action} />
      <div class="toolbar">
        <button type="submit" aria-disabled=${action.busy ? "true" : undefined}>Save the approval policy</button>
        <button type="button" class="secondary" onClick=${() => onDone(false)}>Cancel</button>
      </div>
    </form>`;
}

// Period closes ------------------------------------------------------------------------------------

const CLOSE_FIELDS = ["period_start", "period_end", "note"];

function PeriodClosesSection({ reconciliation, who }) {
  const paging = usePaging();
  const base = `reconciliations/${reconciliation.id}/period_closes`;
  const { loading, error, data, reload } = useApi(`${base}${query({ limit: 10, cursor: paging.cursor })}`);
  const [said, setSaid] = useState("");
  const closer = can("approver");
  const done = (text) => { setSaid(text); reload(); };
  return html`
    <section aria-labelledby="closes-title" class="period-closes">
      <h2 id="closes-title">Period closes</h2>
      <p class="muted">A closed period is signed off: nothing dated inside it is matched, unmatched, deleted or imported
        until an admin reopens it.</p>
      ${closer && html`<${CloseForm} base=${base} onClosed=${(close) => done(`Closed the period ${close.period_start} to ${close.period_end} (close ${close.id}).`)} />`}
      <${Status} text=${said} />
      <${Problem} error=${error} what="load the period closes" />
      ${loading && !data && html`<p>Loading period closes…</p>`}
      ${data && !data.data.length && html`<p>No period closed yet.</p>`}
      ${data && data.data.map((close) => html`<${PeriodClose} key=${close.id} close=${close} reconciliationId=${reconciliation.id}
        who=${who} onReopened=${(c) => done(`Reopened the period ${c.period_start} to ${c.period_end}.`)} />`)}
      ${data && data.data.length > 0 && html`<${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Period closes" />`}
    </section>`;
}

function CloseForm({ base, onClosed }) {
  const [start, setStart] = useState("");
  const [end, setEnd] = useState("");
  const [note, setNote] = useState("");
  const [errors, setErrors] = useState({});
  const action = useAction(CLOSE_FIELDS);
  const shown = { ...action.errors, ...errors };

  async function submit(event) {
    event.preventDefault();
    const found = {};
    if (!start) found.period_start = "choose the period's first day";
    if (!end) found.period_end = "choose the period's last day";
    if (!note.trim()) found.note = "say what is still open in the period, and why";
    setErrors(found);
    if (Object.keys(found).length) {
      document.getElementById(`close-${Object.keys(found)[0].replaceAll("_", "-")}`)?.focus();
      return;
    }
    const made = await action.run(() => api(base, { method: "POST", body: { period_start: start, period_end: end, note: note.trim() } }));
    if (made) {
      setStart(""); setEnd(""); setNote("");
      onClosed(made);
    }
  }

  const edited = () => { action.edited(); };
  return html`
    <form class="settings-form close-form" onSubmit=${submit} aria-labelledby="close-form-title" novalidate>
      <h3 id="close-form-title">Close a period</h3>
      <div class="fields">
        <div>
          <label for="close-period-start">Period start</label>
          <input id="close-period-start" type="date" value=${start} ...${invalid("close-period-start", shown.period_start)}
            onInput=${(e) => { setStart(e.currentTarget.value); edited(); }} />
          <${FieldError} id="close-period-start" message=${shown.period_start} />
        </div>
        <div>
          <label for="close-period-end">Period end</label>
          <input id="close-period-end" type="date" value=${end} ...${invalid("close-period-end", shown.period_end)}
            onInput=${(e) => { setEnd(e.currentTarget.value); edited(); }} />
          <${FieldError} id="close-period-end" message=${shown.period_end} />
        </div>
        <div class="wide">
          <label for="close-note">Sign-off note</label>
          <textarea id="close-note" rows="3" maxlength="2000" value=${note} aria-describedby=${shown.note ? "close-note-hint close-note-error" : "close-note-hint"}
            aria-invalid=${shown.note ? "true" : undefined} onInput=${(e) => { setNote(e.currentTarget.value); edited(); }}></textarea>
          <p class="muted" id="close-note-hint">Your statement about what is still open in the period; it explains each open
            exception. Both days are inside the period.</p>
          <${FieldError} id="close-note" message=${shown.note} />
        </div>
      </div>
      <${Outcome} action=${action} />
      <div class="toolbar"><button type="submit" aria-disabled=${action.busy ? "true" : undefined}>Close the period</button></div>
    </form>`;
}

function moneyLine(m) {
  return html`<li>${plural(m.count, "record")}: credits <${Money} amount=${m.credits} places=${m.decimal_places} currency=${m.currency} />,
    debits <${Money} amount=${m.debits} places=${m.decimal_places} currency=${m.currency} /></li>`;
}

function PeriodClose({ close, reconciliationId, who, onReopened }) {
  const [reason, setReason] = useState("");
  const [reasonError, setReasonError] = useState("");
  const [problem, setProblem] = useState(null);
  const [busy, setBusy] = useState(false);
  const title = `${close.period_start} to ${close.period_end}`;
  const headingId = `close-${close.id}-title`;
  const fieldId = `reopen-${close.id}-reason`;

  async function reopen() {
    if (busy) return false;
    if (!reason.trim()) {
      setReasonError("Give a reason: it is kept on the close and in the audit trail.");
      document.getElementById(fieldId)?.focus();
      return false;
    }
    setBusy(true);
    setProblem(null);
    setReasonError("");
    try {
      const reopened = await api(`reconciliations/${reconciliationId}/period_closes/${close.id}/reopen`,
        { method: "POST", body: { reason: reason.trim() } });
      onReopened(reopened);
      return true;
    } catch (failure) {
      const { errors } = placeErrors(failure, ["reason"]);
      if (errors.reason) { setReasonError(errors.reason); return false; }
      setProblem(failure);
      return true;
    } finally {
      setBusy(false);
    }
  }

  return html`
    <article class="period-close" aria-labelledby=${headingId} data-close-id=${close.id} data-status=${close.status}>
      <h3 id=${headingId}>Period ${title} <span class=${`badge close-${close.status}`}>${close.status}</span></h3>
      <dl class="facts">
        <dt>Closed by</dt><dd>${who(close.closed_by)}, <${When} iso=${close.closed_at} /></dd>
        <dt>Note</dt><dd>${close.note}</dd>
        <dt>Open at close</dt><dd>
          ${close.open_exceptions.length === 0 ? "no open exception" : html`<ul class="close-exceptions">
            ${close.open_exceptions.map((e) => html`<li key=${e.id}><a href=${`#/exceptions/${e.id}`}>${e.title || `Exception ${e.id}`}</a>${" "}
              (${plural(e.record_count, "record")} in the period; ${e.explained_by === "note" ? "explained by the note" : html`explained: ${e.explanation}`})</li>`)}
          </ul>`}</dd>
        <dt>Unmatched at close</dt><dd>${close.unmatched.length === 0 ? "none" : html`<ul class="close-money">${close.unmatched.map(moneyLine)}</ul>`}</dd>
        ${close.status === "reopened" && html`<dt>Reopened by</dt><dd>${who(close.reopened_by)}, <${When} iso=${close.reopened_at} /></dd>
          <dt>Why reopened</dt><dd data-testid=${`reopen-reason-${close.id}`}>${close.reopen_reason}</dd>`}
      </dl>
      <${ExportButton} kind="period_close_report" filters=${{ reconciliation_id: reconciliationId, period_close_id: close.id }}
        label=${`Close report, period ${title}`} />
      <${Problem} error=${problem} what="reopen the period" />
      ${close.status === "closed" && can("admin") && html`
        <${Confirm} label="Reopen" name=${`Reopen the period ${title}`} question=${`Reopen the period ${title}?`}
          yes="Yes, reopen" busy=${busy} onYes=${reopen}>
          <span class="confirm-reason">
            <label for=${fieldId}>Reason for reopening</label>
            <textarea id=${fieldId} rows="2" maxlength="2000" value=${reason}
              aria-invalid=${reasonError ? "true" : undefined} aria-describedby=${reasonError ? `${fieldId}-error` : undefined}
              onInput=${(e) => { setReason(e.currentTarget.value); setReasonError(""); }}></textarea>
            ${reasonError && html`<span class="field-error" id=${`${fieldId}-error`}>${reasonError}</span>`}
          </span>
        <//>`}
    </article>`;
}
