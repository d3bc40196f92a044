// Settings (#/settings, admins only: the navigation offers it to admins, and the API refuses the
// admin routes to anyone else): users and roles, API keys, webhook endpoints with their delivery log,
// the audit trail with its verification. One section a route: #/settings/users (the default),
// #/settings/keys, #/settings/webhooks[/<endpoint id>], #/settings/audit.
import { html } from "./api.js";
import { AuditSection } from "./settings-audit.js";
import { KeysSection } from "./settings-keys.js";
import { UsersSection } from "./settings-users.js";
import { WebhooksSection } from "./settings-webhooks.js";

const SECTIONS = [
  { id: "users", label: "Users and roles", Section: UsersSection },
  { id: "keys", label: "API keys", Section: KeysSection },
  { id: "webhooks", label: "Webhook endpoints", Section: WebhooksSection },
  { id: "audit", label: "Audit trail", Section: AuditSection },
];

export function SettingsPage({ route, session }) {
  const shown = SECTIONS.find((s) => s.id === route.path[0]) || SECTIONS[0];
  return html`
    <nav class="settings-tabs" aria-label="Settings sections">
      <ul>
        ${SECTIONS.map(({ id, label }) => html`
          <li><a href=${`#/settings/${id}`} aria-current=${shown.id === id ? "page" : undefined}>${label}</a></li>`)}
      </ul>
    </nav>
    <section class="settings-section" aria-labelledby="settings-section-title">
      <h2 id="settings-section-title">${shown.label}</h2>
      <${shown.Section} key=${shown.id} route=${route} session=${session} />
    </section>`;
}
