// Settings › Users and roles: the environment's users (GET /v1/users, newest first, paged), an
// invitation (the identity provider mails it), a role changed, a user deactivated or let in again.
// An admin's own row offers nothing: the service refuses changing one's own role or status (409).
import { useEffect, useRef, useState } from "preact/hooks";
import { api, html, query, ROLES } from "./api.js";
import { Confirm, FieldError, invalid, Outcome, Pager, Problem, useAction, useApi, usePaging, When } from "./ui.js";

const PAGE_SIZE = 25;

function InviteForm({ onInvited }) {
  const action = useAction(["email", "name", "role"]);
  async function submit(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const data = new FormData(form);
    const body = { email: data.get("email"), name: data.get("name") || undefined, role: data.get("role") };
    const invited = await action.run(() => api("users", { method: "POST", body }),
      (user) => `Invited ${user.email} as ${user.role}: the invitation is on its way.`);
    if (invited) { form.reset(); onInvited(); }
  }
  const e = action.errors;
  return html`
    <form class="settings-form" onSubmit=${submit} onInput=${action.edited} novalidate aria-labelledby="invite-title">
      <h3 id="invite-title">Invite a person</h3>
      <div class="fields">
        <div>
          <label for="invite-email">Email</label>
          <input id="invite-email" name="email" type="email" autocomplete="off" required ...${invalid("invite-email", e.email)} />
          <${FieldError} id="invite-email" message=${e.email} />
        </div>
        <div>
          <label for="invite-name">Name</label>
          <input id="invite-name" name="name" autocomplete="off" ...${invalid("invite-name", e.name)} />
          <${FieldError} id="invite-name" message=${e.name} />
        </div>
        <div>
          <label for="invite-role">Role</label>
          <select id="invite-role" name="role" ...${invalid("invite-role", e.role)}>
            ${ROLES.map((r) => html`<option value=${r} selected=${r === "viewer"}>${r}</option>`)}
          </select>
          <${FieldError} id="invite-role" message=${e.role} />
        </div>
      </div>
      <button type="submit" aria-disabled=${action.busy ? "true" : undefined}>Invite</button>
      <${Outcome} action=${action} />
    </form>`;
}

function UserRow({ user, self, action, onChanged }) {
  const who = user.name || user.email;
  const [role, setRole] = useState(user.role); // the role asked for shows until the list is read again
  useEffect(() => setRole(user.role), [user.role]);
  const change = (body, said) => action.run(() => api(`users/${user.id}`, { method: "PATCH", body }), said)
    .then((done) => { if (!done) setRole(user.role); onChanged(); });
  const deactivated = user.status === "deactivated";
  // Once deactivated, the focus goes to the row's Re-enable (the question it answered is gone).
  const reEnable = useRef(null);
  const focusReEnable = useRef(false);
  useEffect(() => {
    if (deactivated && focusReEnable.current) { focusReEnable.current = false; reEnable.current?.focus(); }
  }, [deactivated]);
  async function deactivate() {
    const done = await action.run(() => api(`users/${user.id}`, { method: "DELETE" }),
      () => `${who} is deactivated: they cannot sign in.`);
    if (done) focusReEnable.current = true;
    onChanged();
    return Boolean(done);
  }
  return html`
    <tr>
      <td>${user.name || "—"}</td>
      <td>${user.email}</td>
      <td>${self
        ? html`${user.role} <span class="muted">(you)</span>`
        : html`<label class="visually-hidden" for=${`role-${user.id}`}>Role of ${who}</label>
          <select id=${`role-${user.id}`} value=${role}
                  onChange=${(event) => { setRole(event.currentTarget.value); change({ role: event.currentTarget.value }, (u) => `${who} is now ${u.role}.`); }}>
            ${ROLES.map((r) => html`<option value=${r}>${r}</option>`)}
          </select>`}</td>
      <td><span class=${`user-status ${user.status}`}>${user.status}</span></td>
      <td><${When} iso=${user.last_sign_in_at} /></td>
      <td>${self ? "—" : deactivated
        ? html`<button type="button" class="secondary" aria-label=${`Re-enable ${who}`} ref=${reEnable}
                 onClick=${() => change({ status: "active" }, () => `${who} can sign in again.`)}>Re-enable</button>`
        : html`<${Confirm} label="Deactivate" name=${`Deactivate ${who}`} question=${`Deactivate ${who}? They can no longer sign in.`}
                 yes="Yes, deactivate" busy=${action.busy} onYes=${deactivate} />`}</td>
    </tr>`;
}

export function UsersSection({ session }) {
  const paging = usePaging();
  const { data, error, loading, reload } = useApi(`users${query({ limit: PAGE_SIZE, cursor: paging.cursor })}`);
  const action = useAction();
  return html`
    <${InviteForm} onInvited=${() => { paging.reset(); reload(); }} />
    <${Outcome} action=${action} />
    <${Problem} error=${error} what="load the users" />
    ${loading && !data ? html`<p>Loading users…</p>` : data && html`
      <table class="settings-table">
        <caption class="visually-hidden">Users, newest first</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Email</th><th scope="col">Role</th>
          <th scope="col">Status</th><th scope="col">Last sign-in</th><th scope="col">Action</th></tr></thead>
        <tbody>
          ${data.data.map((user) => html`<${UserRow} key=${user.id} user=${user}
              self=${user.id === session.user.id} action=${action} onChanged=${reload} />`)}
        </tbody>
      </table>
      <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Users" />`}`;
}
