// Settings › Webhook endpoints: the endpoints (paged), a new one whose signing secret is shown once,
// and at #/settings/webhooks/<id> an endpoint's delivery log (paged, newest first) where a failed or
// waiting delivery is sent again now.
import { useState } from "preact/hooks";
import { api, html, query } from "./api.js";
import { FieldError, invalid, OnceSecret, Outcome, Pager, Problem, useAction, useApi, usePaging, When } from "./ui.js";

// The event types an endpoint may receive: chalicelib/domain/events.py EVENT_TYPES (a test holds the two
// lists together).
export const EVENT_TYPES = [
  "file_import.completed", "file_import.failed", "file_import.cancelled",
  "bulk_request.completed",
  "reconciliation_run.completed", "reconciliation_run.failed", "reconciliation_run.cancelled",
  "reconciliation_match.created", "reconciliation_match.confirmed", "reconciliation_match.deleted",
  "reconciliation_exception.opened", "reconciliation_exception.status_changed",
  "reconciliation_exception.assigned", "reconciliation_exception.commented",
  "investigation.completed",
  "agent_run.completed", "agent_run.failed", "agent_run.needs_verification",
  "export.completed",
  "bulk_action.completed",
  "approval.requested", "approval.approved", "approval.rejected", "approval.expired",
  "period.closed", "period.reopened",
  "reconciliation_exception.overdue",
];
const PAGE_SIZE = 20;
const RETRYABLE = ["failed", "pending"];

function CreateEndpoint({ onCreated }) {
  const action = useAction(["url", "events", "description"]);
  const [all, setAll] = useState(true);
  const [made, setMade] = useState(null); // the answer with its secret: this answer only
  async function submit(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const data = new FormData(form);
    const events = all ? ["*"] : data.getAll("events");
    const endpoint = await action.run(() => api("webhook_endpoints", { method: "POST", body: {
      url: data.get("url"), events, description: data.get("description") || "" } }),
    (ep) => `Endpoint ${ep.id} created for ${ep.url}.`);
    if (endpoint) { form.reset(); setAll(true); setMade(endpoint); onCreated(); }
  }
  const e = action.errors;
  return html`
    <form class="settings-form" onSubmit=${submit} onInput=${action.edited} novalidate aria-labelledby="endpoint-title">
      <h3 id="endpoint-title">Add an endpoint</h3>
      <div class="fields">
        <div class="wide">
          <label for="endpoint-url">URL</label>
          <input id="endpoint-url" name="url" type="url" autocomplete="off" required placeholder="https://hooks.example.com/recon"
                 ...${invalid("endpoint-url", e.url)} />
          <${FieldError} id="endpoint-url" message=${e.url} />
        </div>
        <div class="wide">
          <label for="endpoint-description">Description</label>
          <input id="endpoint-description" name="description" autocomplete="off" ...${invalid("endpoint-description", e.description)} />
          <${FieldError} id="endpoint-description" message=${e.description} />
        </div>
        <fieldset class=${e.events ? "wide invalid" : "wide"} aria-describedby=${e.events ? "endpoint-events-error" : undefined}>
          <legend>Events</legend>
          <label class="choice"><input type="checkbox" checked=${all} onChange=${(ev) => setAll(ev.currentTarget.checked)} />
            All events, present and future</label>
          ${!all && html`<div class="event-types">${EVENT_TYPES.map((type) => html`
            <label class="choice"><input type="checkbox" name="events" value=${type} /> ${type}</label>`)}</div>`}
          <${FieldError} id="endpoint-events" message=${e.events} />
        </fieldset>
      </div>
      <button type="submit" aria-disabled=${action.busy ? "true" : undefined}>Add endpoint</button>
      <${Outcome} action=${action} />
    </form>
    ${made && html`<${OnceSecret} id="new-endpoint-secret" title=${`The signing secret of endpoint ${made.id}`}
        what="Signing secret (verify each delivery's webhook-signature with it)" secret=${made.secret}
        onDone=${() => setMade(null)} />`}`;
}

function Endpoints() {
  const paging = usePaging();
  const { data, error, loading, reload } = useApi(`webhook_endpoints${query({ limit: PAGE_SIZE, cursor: paging.cursor })}`);
  return html`
    <${CreateEndpoint} onCreated=${() => { paging.reset(); reload(); }} />
    <${Problem} error=${error} what="load the webhook endpoints" />
    ${loading && !data ? html`<p>Loading endpoints…</p>` : data && html`
      <table class="settings-table">
        <caption class="visually-hidden">Webhook endpoints, newest first</caption>
        <thead><tr><th scope="col">URL</th><th scope="col">Events</th><th scope="col">State</th>
          <th scope="col">Failing since</th><th scope="col">Created</th><th scope="col">Deliveries</th></tr></thead>
        <tbody>
          ${data.data.map((ep) => html`
            <tr key=${ep.id}>
              <td class="url">${ep.url}${ep.description && html`<br /><span class="muted">${ep.description}</span>`}</td>
              <td>${ep.events.includes("*") ? "all" : ep.events.join(", ")}</td>
              <td>${ep.active ? "active" : html`inactive${ep.disabled_reason ? `: ${ep.disabled_reason}` : ""}`}</td>
              <td><${When} iso=${ep.failing_since} /></td>
              <td><${When} iso=${ep.created_at} /></td>
              <td><a href=${`#/settings/webhooks/${ep.id}`} aria-label=${`Delivery log of endpoint ${ep.id}, ${ep.url}`}>Delivery log</a></td>
            </tr>`)}
        </tbody>
      </table>
      <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Endpoints" />`}`;
}

function Deliveries({ id }) {
  const endpoint = useApi(`webhook_endpoints/${encodeURIComponent(id)}`);
  const paging = usePaging();
  const { data, error, loading, reload } = useApi(
    `webhook_endpoints/${encodeURIComponent(id)}/deliveries${query({ limit: PAGE_SIZE, cursor: paging.cursor })}`);
  const action = useAction();
  const retry = (d) => action.run(
    () => api(`webhook_endpoints/${encodeURIComponent(id)}/deliveries/${d.id}/retry`, { method: "POST" }),
    () => `Delivery ${d.id} (${d.event_type}) is being sent again.`).then(reload);
  const ep = endpoint.data;
  return html`
    <p><a href="#/settings/webhooks">All endpoints</a></p>
    <${Problem} error=${endpoint.error} what="load the endpoint" />
    ${ep && html`<h3>Deliveries to ${ep.url}</h3>
      <p class="muted">Endpoint ${ep.id} · ${ep.active ? "active" : "inactive"} ·
        events: ${ep.events.includes("*") ? "all" : ep.events.join(", ")}</p>`}
    <div class="toolbar"><button type="button" class="secondary" onClick=${reload}>Refresh the log</button></div>
    <${Outcome} action=${action} />
    <${Problem} error=${error} what="load the deliveries" />
    ${loading && !data ? html`<p>Loading deliveries…</p>` : data && (data.data.length ? html`
      <table class="settings-table">
        <caption class="visually-hidden">Deliveries, newest first</caption>
        <thead><tr><th scope="col">Event</th><th scope="col">Status</th><th scope="col" class="number">Attempts</th>
          <th scope="col">Last answer</th><th scope="col">Last attempt</th><th scope="col">Next attempt</th>
          <th scope="col">Action</th></tr></thead>
        <tbody>
          ${data.data.map((d) => html`
            <tr key=${d.id}>
              <td>${d.event_type}<br /><code class="muted">${d.event_id}</code></td>
              <td><span class=${`delivery-status ${d.status}`}>${d.status}</span></td>
              <td class="number">${d.attempts}</td>
              <td title=${d.response_excerpt ? `The endpoint answered: ${d.response_excerpt}` : undefined}>
                ${d.last_status_code ?? ""}${d.last_error ? html` <span class="muted">${d.last_error}</span>` : ""}
                ${!d.last_status_code && !d.last_error ? "—" : ""}</td>
              <td><${When} iso=${d.last_attempt_at} /></td>
              <td><${When} iso=${d.next_attempt_at} /></td>
              <td>${RETRYABLE.includes(d.status)
                ? html`<button type="button" aria-label=${`Retry delivery ${d.id} (${d.event_type})`}
                         aria-disabled=${action.busy ? "true" : undefined} onClick=${() => retry(d)}>Retry</button>`
                : "—"}</td>
            </tr>`)}
        </tbody>
      </table>
      <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Deliveries" />`
    : html`<p>No deliveries yet: one is made for each event the endpoint receives.</p>`)}`;
}

export function WebhooksSection({ route }) {
  const id = route.path[1];
  return id ? html`<${Deliveries} key=${id} id=${id} />` : html`<${Endpoints} />`;
}
