// Exceptions (#/exceptions): built in the next increment of the web app.
import { html } from "./api.js";

export function ExceptionsPage() {
  return html`<p>This page comes next.</p>`;
}
