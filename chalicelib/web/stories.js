// Stories (#/stories): built in the next increment of the web app.
import { html } from "./api.js";

export function StoriesPage() {
  return html`<p>This page comes next.</p>`;
}
