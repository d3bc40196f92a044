// Export a list as it is filtered (issue 35): ExportButton({kind, filters, label}) asks the service for
// the whole list in a file (POST /exports: a job), reads the job once a second until it ends, and
// then offers its download link (a presigned GET) or says why it failed. Every list page uses it.
import { useEffect, useRef, useState } from "preact/hooks";
import { api, html } from "./api.js";
import { Problem, usePoll } from "./ui.js";

export const EXPORT_FORMATS = [["csv", "CSV"], ["xlsx", "XLSX"], ["parquet", "Parquet"]];
const RUNNING = new Set(["pending", "processing"]);
let made = 0;

// A list route's query (the part of a path after "?") as an export's filters: its paging left out
// (an export is the whole list), its values kept as text (the service reads them as the route does).
export function exportFilters(path) {
  const found = {};
  for (const [name, value] of new URLSearchParams((path || "").split("?")[1] || "")) {
    if (!["offset", "limit", "cursor"].includes(name) && value !== "") found[name] = value;
  }
  return found;
}

const rows = (n) => `${n} row${Number(n) === 1 ? "" : "s"}`;

export function ExportButton({ kind, filters = {}, label = "Export" }) {
  const id = useRef(null);
  if (id.current === null) { made += 1; id.current = `export-${made}`; }
  const [format, setFormat] = useState("csv");
  const [job, setJob] = useState(null);
  const [error, setError] = useState(null);
  const [asking, setAsking] = useState(false);
  // The export shown is of these filters: other filters (or a new export) forget it, and an answer
  // about an export no longer shown is dropped.
  const wanted = useRef(0);
  const key = `${kind} ${format} ${JSON.stringify(filters)}`;
  useEffect(() => { wanted.current += 1; setJob(null); setError(null); setAsking(false); }, [key]);
  useEffect(() => () => { wanted.current += 1; }, []);
  const running = Boolean(job && RUNNING.has(job.status));
  usePoll(async (signal) => {
    const asked = wanted.current;
    const next = await api(`exports/${job.id}`, { signal });
    if (asked === wanted.current) setJob(next);
  }, 1000, running);

  async function start() {
    if (asking || running) return; // aria-disabled: a press does nothing
    wanted.current += 1;
    const asked = wanted.current;
    setJob(null);
    setError(null);
    setAsking(true);
    try {
      const created = await api("exports", { method: "POST", body: { kind, format, filters } });
      if (asked === wanted.current) setJob(created);
    } catch (problem) {
      if (asked === wanted.current) setError(problem);
    } finally {
      if (asked === wanted.current) setAsking(false);
    }
  }

  const busy = asking || running;
  let said = "";
  if (asking) said = "Starting the export…";
  else if (running) said = `Exporting… ${rows(job.rows_written)}`;
  else if (job && job.status === "completed") said = `Export ready: ${rows(job.rows_written)}.`;
  const failed = job && job.status === "failed" ? { message: job.error_message || "the export failed" } : null;
  const file = job ? job.filename || `${kind}.${job.format}` : "";
  return html`
    <div class="export-control" role="group" aria-labelledby=${`${id.current}-label`}>
      <span class="export-label" id=${`${id.current}-label`}>${label}</span>
      <label for=${`${id.current}-format`}>Format</label>
      <select id=${`${id.current}-format`} value=${format} onChange=${(e) => setFormat(e.currentTarget.value)}>
        ${EXPORT_FORMATS.map(([value, name]) => html`<option value=${value} selected=${value === format}>${name}</option>`)}
      </select>
      <button type="button" class="secondary" onClick=${start} aria-disabled=${busy ? "true" : "false"}>Export</button>
      <p class="export-status" role="status" data-testid=${`export-status-${kind}`}>${said}</p>
      ${job && job.status === "completed" && job.download_url
        && html`<a class="export-download" href=${job.download_url} download=${file}>Download ${file}</a>`}
      <${Problem} error=${error} what="start the export" />
      <${Problem} error=${failed} what="export the list" />
    </div>`;
}
