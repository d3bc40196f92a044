// Approvals (#/approvals?status=pending, #/approvals/<id>): the actions a reconciliation's approval
// policy held for a second person (docs/approvals.md). Pending ones first, with what is asked, on what,
// for how much, by whom and until when; an approver (never the requester: four eyes) approves one, or
// rejects it with a reason. The API enforces roles and four eyes again; its refusals are shown.
import { useEffect, useRef, useState } from "preact/hooks";
import { api, can, html, money, query, session } from "./api.js";
import { appliedOption, Confirm, go, Money, Pager, Problem, Status, useAll, useApi, usePaging, usePoll, When } from "./ui.js";

export function ApprovalsPage({ route }) {
  const id = route.path[0];
  return id ? html`<${ApprovalDetail} id=${id} key=${id} />` : html`<${ApprovalList} params=${route.params} />`;
}

export const ACTION_WORDS = {
  manual_match: "Manual match",
  unmatch: "Unmatch a confirmed match",
  dismissal: "Dismiss or resolve an exception",
  accept_investigation: "Accept an investigation's suggestion",
};
const STATUS_WORDS = {
  pending: "Pending", executing: "Running", approved: "Approved", failed: "Approved, failed",
  rejected: "Rejected", expired: "Expired",
};
const STATUSES = ["pending", "executing", "approved", "failed", "rejected", "expired"];
const REFRESH_MS = 15 * 1000; // a pending approval shown is read again: another approver may decide it

// The signed-in person as the API names a requester or decider.
export const myActor = () => `user:${session().user.id}`;

// Names for the actors of the API (user:3, api_key:2, system:…): the users are read once.
export function usePeople() {
  const { data } = useAll("users");
  const names = new Map((data?.data || []).map((u) => [`user:${u.id}`, u.name || u.email]));
  return (actor) => {
    if (!actor) return "—";
    if (actor === myActor()) return "you";
    if (names.has(actor)) return names.get(actor);
    const [kind, id] = actor.split(":");
    if (kind === "api_key") return `API key ${id}`;
    if (kind === "system") return "the service";
    return actor;
  };
}

// A reconciliation by name, a link to its page.
function ReconciliationLink({ id, name }) {
  return html`<a href=${`#/reconciliations/${id}`}>${name || `Reconciliation ${id}`}</a>`;
}

// What the approval acts on, as links: the exception, the match, the records of a manual match and,
// once approved, what it made.
function Target({ approval }) {
  const p = approval.params || {};
  const made = approval.result?.reconciliation_match_id;
  const parts = [];
  if (approval.action === "dismissal" || approval.action === "accept_investigation") {
    const exceptionId = p.exception_id ?? (approval.target_type === "reconciliation_exception" ? approval.target_id : null);
    if (exceptionId !== null && exceptionId !== undefined) parts.push(html`<a href=${`#/exceptions/${exceptionId}`}>Exception ${exceptionId}</a>`);
    if (approval.action === "dismissal" && p.status) parts.push(html`<span> to ${p.status}</span>`);
  }
  if (approval.action === "unmatch") {
    const matchId = p.match_id ?? approval.target_id;
    parts.push(html`<a href=${`#/matches/${matchId}`}>Match ${matchId}</a>`);
  }
  if (approval.action === "manual_match" && Array.isArray(p.record_ids)) {
    parts.push(html`<span>records ${p.record_ids.join(", ")}</span>`);
    // A partial payment's shares (docs/partial-payments.md), as money in each record's currency.
    if (Array.isArray(p.allocations) && p.allocations.length) {
      parts.push(html`<span class="approval-shares">; in part: ${p.allocations.map(([id, share], i) => html`${i ? ", " : ""}<${Share} recordId=${id} share=${share} />`)}</span>`);
    }
  }
  if (made !== undefined && made !== null) parts.push(html`<span>, made <a href=${`#/matches/${made}`}>Match ${made}</a></span>`);
  return parts.length ? html`<span class="approval-target">${parts}</span>` : html`<span>—</span>`;
}

// A share of a record: its minor units are the record's, so its currency and decimal places are read
// from the record (minor units until it is read, or if it cannot be).
function Share({ recordId, share }) {
  const { data } = useApi(`records/${recordId}`);
  return html`record ${recordId} ${data ? money(share, data.decimal_places, data.currency) : `${share} minor units`}`;
}

function amountOf(a) {
  return html`<${Money} amount=${a.amount} places=${a.amount_decimal_places} currency=${a.currency || ""} />
    ${!a.currency && html`<span class="muted"> (several currencies)</span>`}`;
}

function StatusBadge({ status }) {
  return html`<span class=${`badge approval-${status}`}>${STATUS_WORDS[status] || status}</span>`;
}

function ApprovalList({ params }) {
  const status = params.get("status") || "pending"; // "all": every status, pending ones first
  const reconciliationId = params.get("reconciliation_id") || "";
  const paging = usePaging();
  const who = usePeople();
  const reconciliations = useAll("reconciliations"); // every page: the filter's options and the rows' names
  const names = new Map((reconciliations.data?.data || []).map((r) => [r.id, r.name]));
  useEffect(() => { paging.reset(); }, [status, reconciliationId]);
  const path = `approvals${query({ status: status === "all" ? "" : status, reconciliation_id: reconciliationId,
    limit: 25, cursor: paging.cursor })}`;
  const { loading, error, data } = useApi(path);
  const filter = (next) => go("#/approvals", { status, reconciliation_id: reconciliationId, ...next });
  // Pending first (newest first within each), then the rest as the service listed them.
  const rows = data ? [...data.data].sort((a, b) => (a.status === "pending" ? 0 : 1) - (b.status === "pending" ? 0 : 1)) : [];
  const mine = myActor();
  return html`
    <form class="toolbar" onSubmit=${(e) => e.preventDefault()} aria-label="Filter approvals">
      <div>
        <label for="approval-status">Status</label>
        <select id="approval-status" value=${status} onChange=${(e) => filter({ status: e.currentTarget.value })}>
          ${STATUSES.map((s) => html`<option value=${s} selected=${s === status}>${STATUS_WORDS[s]}</option>`)}
          <option value="all" selected=${status === "all"}>All</option>
        </select>
      </div>
      <div>
        <label for="approval-reconciliation">Reconciliation</label>
        <select id="approval-reconciliation" value=${reconciliationId}
          onChange=${(e) => filter({ reconciliation_id: e.currentTarget.value })}>
          <option value="" selected=${!reconciliationId}>All reconciliations</option>
          ${(reconciliations.data?.data || []).map((r) => html`<option value=${String(r.id)}
            selected=${String(r.id) === reconciliationId}>${r.name}</option>`)}
          ${appliedOption(reconciliationId, (reconciliations.data?.data || []).some((r) => String(r.id) === reconciliationId),
            `Reconciliation ${reconciliationId}`)}
        </select>
      </div>
    </form>
    <${Problem} error=${error} what="load the approvals" />
    ${loading && !data && html`<p>Loading approvals…</p>`}
    ${data && !rows.length && html`<p data-testid="approvals-empty">No ${status === "all" ? "" : `${(STATUS_WORDS[status] || status).toLowerCase()} `}approvals${paging.page > 1 ? " on this page" : ""}.</p>`}
    ${rows.length > 0 && html`
      <table class="approvals">
        <caption class="visually-hidden">Approvals, pending first, newest first</caption>
        <thead><tr><th scope="col">Asked</th><th scope="col">On</th><th scope="col" class="number">Amount</th>
          <th scope="col">Requested</th><th scope="col">Expires</th><th scope="col">Status</th></tr></thead>
        <tbody>
          ${rows.map((a) => html`<tr key=${a.id} data-approval-id=${a.id} data-status=${a.status}>
            <td><a href=${`#/approvals/${a.id}`}>${a.description}</a>
              <div class="muted">${ACTION_WORDS[a.action] || a.action} · approval ${a.id}</div></td>
            <td><${ReconciliationLink} id=${a.reconciliation_id} name=${names.get(a.reconciliation_id)} />
              <div><${Target} approval=${a} /></div></td>
            <td class="number">${amountOf(a)}</td>
            <td>by ${who(a.requested_by)}, <${When} iso=${a.requested_at} />
              ${a.status === "pending" && a.requested_by === mine && html`<div class="muted">yours: another approver decides it</div>`}</td>
            <td>${a.status === "pending" ? html`<${When} iso=${a.expires_at} />` : "—"}</td>
            <td><${StatusBadge} status=${a.status} /></td>
          </tr>`)}
        </tbody>
      </table>`}
    ${data && html`<${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Approvals" />`}
    <${Status} text=${loading && data ? "Loading approvals…" : ""} />`;
}

function ApprovalDetail({ id }) {
  const { error, data, reload, refresh } = useApi(`approvals/${encodeURIComponent(id)}`);
  const [shown, setShown] = useState(null); // the answer of a decision, until the next read
  const [problem, setProblem] = useState(null);
  const [said, setSaid] = useState("");
  const [busy, setBusy] = useState(false);
  const [reason, setReason] = useState("");
  const [reasonError, setReasonError] = useState("");
  const outcome = useRef(null);
  const who = usePeople();
  const approval = shown || data;
  const reconciliation = useApi(approval ? `reconciliations/${approval.reconciliation_id}` : null).data;
  useEffect(() => { if (data) setShown(null); }, [data]);
  usePoll((signal) => refresh(signal), REFRESH_MS, Boolean(approval && approval.status === "pending"));

  if (error) return html`<p><a href="#/approvals">All approvals</a></p><${Problem} error=${error} what="load the approval" />`;
  if (!approval) return html`<p>Loading the approval…</p>`;
  const pending = approval.status === "pending";
  const own = approval.requested_by === myActor();
  const approver = can("approver");

  function decided(answer) {
    setShown(answer);
    dispatchEvent(new Event("approvals-changed")); // the navigation's count of pending approvals
    if (answer.status === "approved") setSaid(`Approved: the action ran.${answer.result?.reconciliation_match_id ? ` It made match ${answer.result.reconciliation_match_id}.` : ""}`);
    else if (answer.status === "failed") setSaid("Approved, but the action could not be done (see why below): nothing changed.");
    else if (answer.status === "rejected") setSaid("Rejected: nothing of the action was done.");
    else setSaid(`The approval is ${STATUS_WORDS[answer.status] || answer.status}.`);
    setTimeout(() => outcome.current?.focus(), 0);
  }

  // A refusal (409: decided, expired or changed meanwhile; 403) is shown, and the approval read again
  // so the page shows it as it now is.
  function refused(failure) {
    setProblem(failure);
    setSaid("");
    reload();
    setTimeout(() => outcome.current?.focus(), 0);
  }

  async function approve() {
    if (busy) return;
    setBusy(true);
    setProblem(null);
    try {
      decided(await api(`approvals/${approval.id}/approve`, { method: "POST" }));
    } catch (failure) {
      refused(failure);
    } finally {
      setBusy(false);
    }
  }

  async function reject() {
    if (busy) return false;
    if (!reason.trim()) {
      setReasonError("Give a reason: the requester reads it.");
      document.getElementById("reject-reason")?.focus();
      return false;
    }
    setBusy(true);
    setProblem(null);
    setReasonError("");
    try {
      decided(await api(`approvals/${approval.id}/reject`, { method: "POST", body: { reason: reason.trim() } }));
      setReason("");
      return true;
    } catch (failure) {
      if (failure.status === 422) {
        setReasonError(failure.errors.map((e) => e.message).join("; ") || failure.message);
        return false;
      }
      refused(failure);
      return true;
    } finally {
      setBusy(false);
    }
  }

  return html`
    <p><a href="#/approvals">All approvals</a></p>
    <h2>Approval ${approval.id}: ${approval.description}</h2>
    <dl class="facts approval-facts">
      <dt>Status</dt><dd data-testid="approval-status"><${StatusBadge} status=${approval.status} /></dd>
      <dt>Action</dt><dd>${ACTION_WORDS[approval.action] || approval.action}</dd>
      <dt>Reconciliation</dt><dd><${ReconciliationLink} id=${approval.reconciliation_id} name=${reconciliation?.name} /></dd>
      <dt>On</dt><dd><${Target} approval=${approval} /></dd>
      <dt>Amount</dt><dd>${amountOf(approval)}
        ${approval.threshold !== null && approval.threshold !== undefined
          && html`<span class="muted"> (waits above <${Money} amount=${approval.threshold} places=${approval.threshold_decimal_places} />)</span>`}</dd>
      <dt>Requested by</dt><dd>${who(approval.requested_by)}, <${When} iso=${approval.requested_at} /></dd>
      ${pending && html`<dt>Expires</dt><dd><${When} iso=${approval.expires_at} /></dd>`}
      ${approval.decided_by && html`<dt>Decided by</dt><dd>${who(approval.decided_by)}, <${When} iso=${approval.decided_at} /></dd>`}
      ${approval.rejection_reason && html`<dt>Why rejected</dt><dd data-testid="rejection-reason">${approval.rejection_reason}</dd>`}
      ${approval.failure_reason && html`<dt>Why it failed</dt><dd data-testid="failure-reason">${approval.failure_reason}</dd>`}
      ${approval.status === "expired" && html`<dt>Expired</dt><dd><${When} iso=${approval.expires_at} />: nothing was done; ask again if it is still needed.</dd>`}
    </dl>
    <section aria-labelledby="decision-title" class="approval-decision">
      <h2 id="decision-title">Decision</h2>
      <p class="status" role="status" tabindex="-1" ref=${outcome} data-testid="approval-outcome">${said}</p>
      <${Problem} error=${problem} what="decide the approval" />
      ${pending && own && html`<p class="four-eyes" data-testid="four-eyes">You requested this approval, so you cannot
        approve or reject it: another approver or admin must decide it (four eyes).</p>`}
      ${pending && !own && !approver && html`<p class="four-eyes" data-testid="four-eyes">An approver or admin decides it;
        your role (${session().user.role}) reads it only.</p>`}
      ${pending && !own && approver && html`
        <div class="actions approval-actions">
          <button type="button" onClick=${approve} aria-disabled=${busy ? "true" : undefined}>Approve</button>
          <${Confirm} label="Reject" name=${`Reject approval ${approval.id}`} question=${`Reject approval ${approval.id}?`}
            yes="Yes, reject" busy=${busy} onYes=${reject}>
            <span class="confirm-reason">
              <label for="reject-reason">Reason for rejecting</label>
              <textarea id="reject-reason" rows="3" maxlength="1000" value=${reason} required
                aria-invalid=${reasonError ? "true" : undefined}
                aria-describedby=${reasonError ? "reject-reason-error" : undefined}
                onInput=${(e) => { setReason(e.currentTarget.value); setReasonError(""); }}></textarea>
              ${reasonError && html`<span class="field-error" id="reject-reason-error">${reasonError}</span>`}
            </span>
          <//>
        </div>`}
      ${!pending && !said && html`<p>${approval.status === "executing" ? "An approver approved it; the action is running." : "Decided: nothing more to do here."}</p>`}
    </section>`;
}
