// Reconciliations (#/reconciliations): built in the next increment of the web app.
import { html } from "./api.js";

export function ReconciliationsPage() {
  return html`<p>This page comes next.</p>`;
}
