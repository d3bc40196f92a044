// Settings › API keys: the environment's keys (revoked ones too; never a secret), a new key whose
// secret is shown once, and revoking a key after a confirmation.
import { useState } from "preact/hooks";
import { api, html } from "./api.js";
import { Confirm, FieldError, invalid, OnceSecret, Outcome, Problem, useAction, useApi, When } from "./ui.js";

const ACCESS = { full: "Full (every route, as an admin)", read_only: "Read only (reads, as a viewer)" };

function CreateKey({ onCreated }) {
  const action = useAction(["label", "access"]);
  const [made, setMade] = useState(null); // {id, label, secret}: this answer only
  async function submit(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const data = new FormData(form);
    const key = await action.run(() => api("api_keys", { method: "POST", body: {
      label: data.get("label") || undefined, access: data.get("access") } }),
    (k) => `Key ${k.id} created, ${k.access === "full" ? "full" : "read only"}.`);
    if (key) { form.reset(); setMade(key); onCreated(); }
  }
  const e = action.errors;
  return html`
    <form class="settings-form" onSubmit=${submit} onInput=${action.edited} novalidate aria-labelledby="key-title">
      <h3 id="key-title">Create a key</h3>
      <div class="fields">
        <div>
          <label for="key-label">Label</label>
          <input id="key-label" name="label" autocomplete="off" ...${invalid("key-label", e.label)} />
          <${FieldError} id="key-label" message=${e.label} />
        </div>
        <fieldset class=${e.access ? "invalid" : undefined} aria-describedby=${e.access ? "key-access-error" : undefined}>
          <legend>Access</legend>
          ${Object.entries(ACCESS).map(([value, label]) => html`
            <label class="choice"><input type="radio" name="access" value=${value} checked=${value === "read_only"} /> ${label}</label>`)}
          <${FieldError} id="key-access" message=${e.access} />
        </fieldset>
      </div>
      <button type="submit" aria-disabled=${action.busy ? "true" : undefined}>Create key</button>
      <${Outcome} action=${action} />
    </form>
    ${made && html`<${OnceSecret} id="new-key-secret" title=${`The secret of key ${made.id}${made.label ? ` (${made.label})` : ""}`}
        what="API key (send it as X-API-KEY)" secret=${made.secret} onDone=${() => setMade(null)} />`}`;
}

export function KeysSection() {
  const { data, error, loading, reload } = useApi("api_keys");
  const action = useAction();
  const revoke = (key) => action.run(() => api(`api_keys/${key.id}`, { method: "DELETE" }),
    () => `Key ${key.id} is revoked: it is refused from its next request.`).then((done) => { reload(); return done; });
  return html`
    <${CreateKey} onCreated=${reload} />
    <${Outcome} action=${action} />
    <${Problem} error=${error} what="load the API keys" />
    ${loading && !data ? html`<p>Loading keys…</p>` : data && html`
      <table class="settings-table">
        <caption class="visually-hidden">API keys</caption>
        <thead><tr><th scope="col">Key</th><th scope="col">Label</th><th scope="col">Access</th>
          <th scope="col">Created</th><th scope="col">Last used</th><th scope="col">Revoked</th>
          <th scope="col">Action</th></tr></thead>
        <tbody>
          ${data.data.map((key) => html`
            <tr key=${key.id}>
              <td class="number">${key.id}</td>
              <td>${key.label || "—"}</td>
              <td>${key.access === "full" ? "full" : "read only"}</td>
              <td><${When} iso=${key.created_at} /></td>
              <td><${When} iso=${key.last_used_at} /></td>
              <td><${When} iso=${key.revoked_at} /></td>
              <td>${key.revoked_at ? "—" : html`<${Confirm} label=${`Revoke key ${key.id}`} yes="Yes, revoke"
                  question=${`Revoke key ${key.id}${key.label ? ` (${key.label})` : ""}? Anything using it is refused.`}
                  busy=${action.busy} onYes=${() => revoke(key)} />`}</td>
            </tr>`)}
        </tbody>
      </table>`}`;
}
