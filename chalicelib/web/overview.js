// Overview (#/overview): each reconciliation with its last run and match rate.
import { html, percent } from "./api.js";
import { Problem, useApi, When } from "./ui.js";

export function OverviewPage() {
  const { loading, error, data } = useApi("reconciliations?limit=100");
  if (error) return html`<${Problem} error=${error} what="load the reconciliations" />`;
  if (loading && !data) return html`<p>Loading reconciliations…</p>`;
  if (!data.data.length) return html`<p>No reconciliations yet.</p>`;
  return html`
    <table>
      <caption class="visually-hidden">Reconciliations</caption>
      <thead><tr><th scope="col">Name</th><th scope="col">Last run</th><th scope="col">When</th>
        <th scope="col" class="number">Match rate</th></tr></thead>
      <tbody>
        ${data.data.map((r) => {
          const run = r.current_run || r.last_run;
          return html`<tr>
            <td>${r.name}</td>
            <td>${run ? run.status : "never run"}</td>
            <td>${run ? html`<${When} iso=${run.completed_at || run.started_at || run.created_at} />` : "—"}</td>
            <td class="number">${run ? percent(run.matched_records, run.total_records) : "—"}</td>
          </tr>`;
        })}
      </tbody>
    </table>`;
}
