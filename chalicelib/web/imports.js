// Imports (#/imports): drop a CSV, NACHA or bank statement file, watch it upload and land, read the
// rows that failed, cancel; the data streams with their balances and their recent imports.
//
// The file goes from the browser straight to the import's upload URL (a presigned S3 PUT: the bucket's
// CORS allows it, and the page's CSP connect-src names the bucket's origin; docs/web-app.md), sent with
// XMLHttpRequest because fetch() reports no upload progress. The import is then read every second
// until it ends.
import { useEffect, useRef, useState } from "preact/hooks";
import { api, can, html, money, query } from "./api.js";
import { LIST_PAGE, Money, Pager, Problem, readAll, Status, useAll, useApi, usePaging, When } from "./ui.js";
import { ExportButton } from "./export.js";

// An import is read twice a second while it runs: the service counts a 500-row chunk at a time, so a
// chunk that lands just after a read shows half a second later, and the bar moves well within 2 s.
const POLL_MS = 500;
const RUNNING = ["pending", "processing", "replicating"];
const CANCELLABLE = ["pending", "processing"];
const FORMATS = [
  { id: "csv", label: "CSV", ends: [".csv", ".txt"] },
  { id: "nacha", label: "NACHA", ends: [".ach", ".nacha"] },
  { id: "bai2", label: "BAI2 statement", ends: [".bai", ".bai2"] },
  { id: "camt053", label: "camt.053 statement", ends: [".xml", ".053"] },
  { id: "mt940", label: "MT940 statement", ends: [".sta", ".mt940", ".940"] },
];
const DATE_FORMATS = ["YYYY-MM-DD", "MM/DD/YYYY", "DD/MM/YYYY"];
const STATEMENTS = ["bai2", "camt053", "mt940"];
// The stream select's choice for a statement routed by account (POST /file_imports): no stream key is empty.
const ROUTED = "";

// The format a file's name suggests (the person may change it): "nov.ach" -> "nacha".
export function guessFormat(name) {
  const lower = (name || "").toLowerCase();
  const found = FORMATS.find((f) => f.ends.some((end) => lower.endsWith(end)));
  return found ? found.id : "csv";
}

// "Bank amount=amount, Value date=date" (or one a line) -> {"Bank amount": "amount", "Value date": "date"};
// throws on a part without "=".
export function readMapping(text) {
  const mapping = {};
  for (const part of (text || "").split(/[\n,]/).map((p) => p.trim()).filter(Boolean)) {
    const at = part.lastIndexOf("=");
    if (at <= 0 || at === part.length - 1) throw new Error(`"${part}" is not "source column=field"`);
    mapping[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return mapping;
}

const count = (n) => money(n ?? 0, 0);
const bytes = (n) => (n >= 1024 * 1024 ? `${(n / 1024 / 1024).toFixed(1)} MB` : `${Math.max(1, Math.round(n / 1024))} KB`);

// PUT a file to a presigned URL, reporting (sent, total) as it goes; resolves when S3 has it.
function putFile(url, file, onProgress, onStart) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    xhr.upload.onprogress = (event) => onProgress(event.loaded, event.lengthComputable ? event.total : file.size);
    xhr.onload = () => (xhr.status >= 200 && xhr.status < 300
      ? resolve() : reject(new Error(`the bucket refused the file (HTTP ${xhr.status})`)));
    xhr.onerror = () => reject(new Error("the file did not reach the bucket"));
    xhr.onabort = () => reject(Object.assign(new Error("the upload was stopped"), { name: "AbortError" }));
    onStart(xhr);
    xhr.send(file);
  });
}

// The drop zone: a labelled file input (keyboard and screen readers use it as it is) inside an area
// files can be dropped on.
function DropZone({ file, onFile }) {
  const [over, setOver] = useState(false);
  const input = useRef(null);
  const drop = (event) => {
    event.preventDefault();
    setOver(false);
    const [dropped] = event.dataTransfer.files;
    if (!dropped) return;
    input.current.files = event.dataTransfer.files; // the input names the dropped file too
    onFile(dropped);
  };
  return html`
    <div class=${`drop-zone${over ? " over" : ""}`} data-testid="drop-zone"
         onDragOver=${(e) => { e.preventDefault(); setOver(true); }} onDragLeave=${() => setOver(false)} onDrop=${drop}>
      <label for="import-file">File to import</label>
      <input id="import-file" type="file" ref=${input} aria-describedby="import-file-hint"
             accept=".csv,.txt,.ach,.nacha,.bai,.bai2,.xml,.053,.sta,.mt940,.940"
             onChange=${(e) => e.currentTarget.files[0] && onFile(e.currentTarget.files[0])} />
      <p id="import-file-hint">Drop a CSV, NACHA, BAI2, camt.053 or MT940 file here, or choose one.</p>
      ${file && html`<p class="chosen">${file.name} · ${bytes(file.size)}</p>`}
    </div>`;
}

function ImportForm({ streams, onStarted, onUpload }) {
  const [file, setFile] = useState(null);
  const [format, setFormat] = useState("csv");
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);

  const choose = (chosen) => { setFile(chosen); setFormat(guessFormat(chosen.name)); setError(null); };

  async function submit(event) {
    event.preventDefault();
    if (busy) return;
    const form = new FormData(event.currentTarget);
    if (!file) return setError(new Error("choose a file first"));
    const body = { filename: file.name, format, on_conflict: form.get("on_conflict") };
    const routed = STATEMENTS.includes(format) && form.get("stream") === ROUTED;
    if (STATEMENTS.includes(format)) body.control_mismatch = form.get("control_mismatch");
    if (format === "csv") {
      body.date_format = form.get("date_format");
      try { body.column_mapping = readMapping(form.get("column_mapping")); } catch (problem) { return setError(problem); }
    }
    setBusy(true);
    setError(null);
    try {
      const job = routed ? await api("file_imports", { method: "POST", body })
        : await api(`data_streams/${encodeURIComponent(form.get("stream"))}/file_imports`, { method: "POST", body });
      onStarted(job, routed ? null : form.get("stream"));
      await onUpload(job, file);
    } catch (problem) {
      if (problem.name !== "AbortError") setError(problem);
    } finally {
      setBusy(false);
    }
  }

  return html`
    <form class="card import-form" onSubmit=${submit} aria-labelledby="import-form-title" novalidate>
      <h2 id="import-form-title">Import a file</h2>
      <${DropZone} file=${file} onFile=${choose} />
      <div class="toolbar">
        <div><label for="import-stream">Data stream</label>
          <select id="import-stream" name="stream" required aria-describedby=${STATEMENTS.includes(format) ? "import-stream-hint" : undefined}>
            ${streams.map((s) => html`<option value=${s.key}>${s.name} (${s.key})</option>`)}
            ${STATEMENTS.includes(format) && html`<option value=${ROUTED}>Each account to its bank feed stream</option>`}
          </select></div>
        <div><label for="import-format">Format</label>
          <select id="import-format" name="format" value=${format} onChange=${(e) => setFormat(e.currentTarget.value)}>
            ${FORMATS.map((f) => html`<option value=${f.id}>${f.label}</option>`)}
          </select></div>
        <div><label for="import-conflict">Rows whose external id exists</label>
          <select id="import-conflict" name="on_conflict">
            <option value="skip">Skip them</option><option value="error">Fail them</option>
          </select></div>
        ${STATEMENTS.includes(format) && html`
          <div><label for="import-controls">Totals that disagree</label>
            <select id="import-controls" name="control_mismatch">
              <option value="refuse">Refuse the file</option><option value="warn">Import it with a warning</option>
            </select></div>`}
        ${format === "csv" && html`
          <div><label for="import-date-format">Date format</label>
            <select id="import-date-format" name="date_format">
              ${DATE_FORMATS.map((d) => html`<option value=${d}>${d}</option>`)}
            </select></div>`}
      </div>
      ${STATEMENTS.includes(format) && html`<p id="import-stream-hint" class="hint">A statement goes into the stream
        chosen (its account only), or each of its accounts to the bank feed stream whose account it is.</p>`}
      ${format === "csv" && html`
        <label for="import-mapping">Column mapping (optional)</label>
        <input id="import-mapping" name="column_mapping" aria-describedby="import-mapping-hint" autocomplete="off" />
        <p id="import-mapping-hint" class="hint">Source column=field, comma separated (fields: date, amount,
          direction, description, external_id, currency; any other name is kept as metadata). Columns already
          named as fields need none.</p>`}
      <${Problem} error=${error} what="import the file" />
      <button type="submit" aria-disabled=${busy ? "true" : undefined}>Import</button>
    </form>`;
}

function UploadProgress({ upload }) {
  if (!upload) return null;
  return html`
    <div class="progress-row">
      <label for="upload-progress">Upload</label>
      <progress id="upload-progress" max=${upload.total || 1} value=${upload.sent}
                aria-valuetext=${`${bytes(upload.sent)} of ${bytes(upload.total)}`}></progress>
      <span>${upload.error ? html`<span class="error">${upload.error}</span>`
        : `${bytes(upload.sent)} of ${bytes(upload.total)}${upload.done ? " · sent" : ""}`}</span>
    </div>`;
}

// What the import says of its rows: "1,500 of 100,000 rows" (none yet while the file is read).
function rowsText(job) {
  if (job.status === "pending") return "waiting for the file";
  if (job.parsing) return "reading the file";
  return `${count(job.processed_items)} of ${count(job.total_items)} rows`;
}

function ImportProgress({ job }) {
  const known = !job.parsing && job.total_items > 0;
  return html`
    <div class="progress-row">
      <label for="import-progress">Import</label>
      ${known
        ? html`<progress id="import-progress" max=${job.total_items} value=${job.processed_items}
                         aria-valuetext=${rowsText(job)}></progress>`
        : html`<progress id="import-progress" aria-valuetext=${rowsText(job)}></progress>`}
      <span data-testid="import-rows">${rowsText(job)}</span>
    </div>`;
}

function FailedRows({ job }) {
  const paging = usePaging();
  const { data, error } = useApi(`file_imports/${job.id}/results${query({ status: "failed", limit: 50, cursor: paging.cursor })}`);
  if (error) return html`<${Problem} error=${error} what="load the failed rows" />`;
  if (!data) return html`<p>Loading the failed rows…</p>`;
  if (!data.data.length && paging.page === 1) return null;
  return html`
    <section aria-labelledby="failed-rows-title">
      <h3 id="failed-rows-title">Failed rows</h3>
      <table>
        <caption class="visually-hidden">Rows of ${job.filename} that failed, with their line and reason</caption>
        <thead><tr><th scope="col" class="number">Line</th><th scope="col">External id</th><th scope="col">Reason</th></tr></thead>
        <tbody>
          ${data.data.map((r) => html`<tr>
            <td class="number">${r.line ?? "—"}</td><td>${r.external_id || "—"}</td><td>${r.error}</td></tr>`)}
        </tbody>
      </table>
      <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Failed rows" />
      <${ExportButton} kind="file_import_results" filters=${{ file_import_id: String(job.id), status: "failed" }}
        label="Export the failed rows" />
    </section>`;
}

const ROUTED_PAGES = 20; // a routed statement's records are counted per stream from at most 4,000 of them

// What a routed statement wrote into each stream, from its records (GET /file_imports/{id}/records,
// LIST_PAGE a page, at most ROUTED_PAGES pages): per stream key, {count, credits, debits (BigInt
// minor units), currencies, places, first, last}, and whether every record was read. (Each stream's list of imports
// has its part's totals too, but not their decimal places, which the records carry.)
export function perStream(records) {
  const found = new Map();
  for (const r of records) {
    const s = found.get(r.data_stream_key) || { count: 0, credits: 0n, debits: 0n, currencies: new Set(), places: 0, first: r.date, last: r.date };
    s.count += 1;
    if (r.direction === "credit") s.credits += BigInt(r.amount); else s.debits += BigInt(r.amount);
    s.currencies.add(r.currency);
    s.places = Math.max(s.places, r.decimal_places ?? 2);
    if (r.date < s.first) s.first = r.date;
    if (r.date > s.last) s.last = r.date;
    found.set(r.data_stream_key, s);
  }
  return found;
}

function useRoutedTotals(job) {
  const [state, setState] = useState(null);
  useEffect(() => {
    const abort = new AbortController();
    readAll(`file_imports/${job.id}/records`, { signal: abort.signal, maxPages: ROUTED_PAGES, capped: true })
      .then(({ items, complete }) => setState({ byStream: perStream(items), complete }))
      .catch((error) => { if (error.name !== "AbortError") setState({ error }); });
    return () => abort.abort();
  }, [job.id]);
  return state;
}

function RoutedStreams({ job, routed }) {
  const totals = useRoutedTotals(job);
  const of = (stream) => totals && totals.byStream && totals.byStream.get(stream.key);
  const atLeast = totals && totals.byStream && !totals.complete ? "at least " : "";
  return html`
    <table>
      <caption>Streams the statement was routed to, with their account</caption>
      <thead><tr><th scope="col">Data stream</th><th scope="col">Account</th><th scope="col" class="number">Records</th>
        <th scope="col" class="number">Net amount</th><th scope="col">Dates</th></tr></thead>
      <tbody>${routed.map((stream) => {
        const t = of(stream);
        const one = t && t.currencies.size === 1 ? [...t.currencies][0] : null;
        return html`<tr key=${stream.id}>
          <td>${stream.name} <span class="muted">(${stream.key})</span></td>
          <td>${stream.bank_account_id || "—"}</td>
          <td class="number">${t ? `${atLeast}${count(t.count)}` : (totals ? "—" : "…")}</td>
          <td class="number">${t && one && !atLeast ? html`<${Money} amount=${t.credits - t.debits} places=${t.places} currency=${one} />`
            : (t && !one ? "several currencies" : "—")}</td>
          <td>${t ? (t.first === t.last ? t.first : `${t.first} to ${t.last}`) : "—"}</td>
        </tr>`;
      })}</tbody>
    </table>
    ${totals && totals.error && html`<${Problem} error=${totals.error} what="count the records of each stream" />`}
    ${atLeast && html`<p class="hint">Counted from the first ${count(ROUTED_PAGES * LIST_PAGE)} records of the import.</p>`}`;
}

const DETAIL_FIELDS = [["line", "Line"], ["element", "Element"], ["statement_id", "Statement"], ["account", "Account"],
  ["expected", "Expected"], ["found", "Found"]];

// Where a bank statement went (docs/bank_statements.md): the streams it wrote into, each with its
// account and what it got; the accounts of the file no stream took; the warnings of a lenient import;
// where a refused file broke.
function StatementOutcome({ job, streams }) {
  if (!STATEMENTS.includes(job.source)) return null;
  const details = job.error_details || {};
  const left = details.accounts_not_imported || [];
  const warnings = details.warnings || [];
  const byId = new Map(streams.map((s) => [s.id, s]));
  const routed = job.data_stream_ids.map((id) => byId.get(id)).filter(Boolean);
  const running = RUNNING.includes(job.status);
  const broke = job.status === "failed" && DETAIL_FIELDS.some(([key]) => details[key] !== undefined && details[key] !== null);
  return html`
    <section aria-labelledby="statement-title" data-testid="statement-outcome">
      <h3 id="statement-title">Statement accounts</h3>
      ${running && html`<p>The streams its accounts go to are listed once the import completes.</p>`}
      ${!running && job.status !== "failed" && (routed.length ? html`<${RoutedStreams} job=${job} routed=${routed} />`
        : html`<p>No transaction of the statement was written into a stream.</p>`)}
      ${left.length > 0 && html`
        <div data-testid="accounts-not-imported"><p><strong>Accounts not imported</strong>
          (${job.status === "failed" ? "no bank feed stream holds them" : "no stream took them"}):</p>
          <ul>${left.map((a) => html`<li key=${a}><code>${a}</code></li>`)}</ul>
          <p class="hint">Set a bank feed stream's account to one of them (Settings) and import the file again.</p></div>`}
      ${warnings.length > 0 && html`
        <div><p><strong>Warnings</strong>${details.warning_count > warnings.length ? ` (the first ${warnings.length} of ${count(details.warning_count)})` : ""}:</p>
          <ul class="warnings">${warnings.map((w, i) => html`<li key=${i}>${w}</li>`)}</ul></div>`}
      ${broke && html`
        <div data-testid="where-refused"><p><strong>Where the file was refused</strong></p>
          <dl class="counts">
            ${DETAIL_FIELDS.filter(([key]) => details[key] !== undefined && details[key] !== null).map(([key, label]) => html`
              <div key=${key}><dt>${label}</dt><dd>${String(details[key])}</dd></div>`)}
          </dl></div>`}
    </section>`;
}

// One import, read every second while it runs; its upload's progress while the file is on its way.
function ImportWatch({ id, upload, streams, onCancel, onEnded }) {
  const [job, setJob] = useState(null);
  const [error, setError] = useState(null);
  const [cancelError, setCancelError] = useState(null);
  const [tick, setTick] = useState(0);

  useEffect(() => {
    const abort = new AbortController();
    let timer = null;
    const read = async () => {
      const asked = Date.now();
      try {
        const answer = await api(`file_imports/${id}`, { signal: abort.signal });
        setJob(answer);
        setError(null);
        // POLL_MS from when this read was asked, not answered: a slow answer does not slow the bar.
        if (RUNNING.includes(answer.status)) timer = setTimeout(read, Math.max(0, POLL_MS - (Date.now() - asked)));
        else onEnded(answer);
      } catch (problem) {
        if (problem.name === "AbortError") return;
        setError(problem);
        timer = setTimeout(read, POLL_MS * 5); // the service did not answer: ask again, less often
      }
    };
    read();
    return () => { abort.abort(); clearTimeout(timer); };
  }, [id, tick]);

  async function cancel() {
    setCancelError(null);
    try {
      onCancel(); // an upload on its way stops first
      setJob(await api(`file_imports/${id}/cancel`, { method: "POST" }));
      setTick((n) => n + 1); // read again at once (and go on while it runs)
    } catch (problem) {
      setCancelError(problem);
    }
  }

  if (!job) return html`<section class="card watch"><p>Loading import ${id}…</p><${Problem} error=${error} what="read the import" /></section>`;
  const running = RUNNING.includes(job.status);
  const cancelling = job.cancellation_requested_at && running;
  return html`
    <section class="card watch" aria-labelledby="watch-title">
      <h2 id="watch-title">Import ${job.id}: ${job.filename}</h2>
      <${Status} text=${`Import ${job.id} ${cancelling ? "is being cancelled" : `is ${job.status}`}.`} />
      <${UploadProgress} upload=${upload} />
      <${ImportProgress} job=${job} />
      <dl class="counts">
        <div><dt>Status</dt><dd data-testid="import-status">${job.status}</dd></div>
        <div><dt>Imported</dt><dd>${count(job.successful_items)}</dd></div>
        <div><dt>Failed</dt><dd>${count(job.failed_items)}</dd></div>
        <div><dt>Skipped</dt><dd>${count(job.skipped_items)}</dd></div>
        <div><dt>Started</dt><dd><${When} iso=${job.started_at || job.created_at} /></dd></div>
        ${job.completed_at && html`<div><dt>Ended</dt><dd><${When} iso=${job.completed_at} /></dd></div>`}
      </dl>
      ${job.error_message && html`<p class=${job.status === "failed" ? "error" : ""}>${job.error_message}</p>`}
      ${job.stuck && html`<p class="error">No progress for over five minutes: the service restarts it.</p>`}
      <${Problem} error=${error} what="read the import" />
      ${can("preparer") && CANCELLABLE.includes(job.status) && html`
        <button type="button" onClick=${cancel} aria-disabled=${cancelling ? "true" : undefined}>
          ${cancelling ? "Cancelling…" : "Cancel import"}</button>`}
      <${Problem} error=${cancelError} what="cancel the import" />
      <${StatementOutcome} job=${job} streams=${streams} />
      ${!running && job.failed_items > 0 && html`<${FailedRows} job=${job} />`}
    </section>`;
}

function Balance({ day }) {
  if (!day) return html`<span>—</span>`;
  return html`<${Money} amount=${day.closing_booked} places=${day.decimal_places} currency=${day.currency} />
    <span class="muted"> on ${day.date}</span>`;
}

// A bank_feed stream's statement days, newest first, as the bank reported them (the balances route).
function StatementDays({ stream, reloadKey }) {
  const paging = usePaging();
  const { data, error, reload } = useApi(`data_streams/${encodeURIComponent(stream.key)}/balances${query({ limit: 10, cursor: paging.cursor })}`);
  useEffect(() => { if (reloadKey) reload(); }, [reloadKey]);
  if (error) return html`<${Problem} error=${error} what="load the stream's balances" />`;
  if (!data) return html`<p>Loading the balances of ${stream.name}…</p>`;
  const amount = (day, value) => html`<${Money} amount=${value} places=${day.decimal_places} currency=${day.currency} />`;
  return html`
    <section aria-labelledby="statement-days-title">
      <h2 id="statement-days-title">Balances of ${stream.name}</h2>
      ${!data.data.length ? html`<p>No statement imported into this stream yet.</p>` : html`
        <table>
          <caption class="visually-hidden">Statement days of ${stream.name}, newest first</caption>
          <thead><tr><th scope="col">Date</th><th scope="col" class="number">Opening booked</th>
            <th scope="col" class="number">Closing booked</th><th scope="col" class="number">Closing available</th>
            <th scope="col">Gap</th></tr></thead>
          <tbody>
            ${data.data.map((d) => html`<tr>
              <td>${d.date}</td><td class="number">${amount(d, d.opening_booked)}</td>
              <td class="number">${amount(d, d.closing_booked)}</td><td class="number">${amount(d, d.closing_available)}</td>
              <td>${d.gap ? html`<span class="error">opening differs from the day before's closing</span>` : "—"}</td>
            </tr>`)}
          </tbody>
        </table>
        <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Statement days" />`}
    </section>`;
}

function StreamImports({ stream, onShow, reloadKey }) {
  const paging = usePaging();
  const { data, error, reload } = useApi(`data_streams/${encodeURIComponent(stream.key)}/file_imports${query({ limit: 10, cursor: paging.cursor })}`);
  useEffect(() => { if (reloadKey) reload(); }, [reloadKey]);
  if (error) return html`<${Problem} error=${error} what="load the stream's imports" />`;
  if (!data) return html`<p>Loading the imports of ${stream.name}…</p>`;
  return html`
    <section aria-labelledby="stream-imports-title">
      <h2 id="stream-imports-title">Imports of ${stream.name}</h2>
      ${!data.data.length ? html`<p>No imports into this stream yet.</p>` : html`
        <table>
          <caption class="visually-hidden">Imports of ${stream.name}, newest first</caption>
          <thead><tr><th scope="col">Import</th><th scope="col">File</th><th scope="col">Status</th>
            <th scope="col" class="number">Rows</th><th scope="col" class="number">Failed</th>
            <th scope="col" class="number">Net amount</th><th scope="col">Created</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
          <tbody>
            ${data.data.map((j) => html`<tr>
              <td>${j.id}</td><td>${j.filename || j.source}</td><td>${j.status}</td>
              <td class="number">${count(j.total_items)}</td><td class="number">${count(j.failed_items)}</td>
              <td class="number">${j.status === "completed" ? html`<${Money} amount=${j.net_amount} places=${j.decimal_places ?? 2} currency=${j.currency || ""} />` : "—"}</td>
              <td><${When} iso=${j.created_at} /></td>
              <td><button type="button" class="small" onClick=${() => onShow(j.id)} aria-label=${`Show import ${j.id}`}>Show</button></td>
            </tr>`)}
          </tbody>
        </table>
        <${Pager} paging=${paging} nextCursor=${data.next_cursor} label="Imports" />`}
    </section>`;
}

function Streams({ streams, listed, onList }) {
  return html`
    <section aria-labelledby="streams-title">
      <h2 id="streams-title">Data streams</h2>
      <table>
        <caption class="visually-hidden">Data streams with their records and latest balance</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Key</th><th scope="col">Type</th>
          <th scope="col" class="number">Records</th><th scope="col">Latest closing balance</th>
          <th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
        <tbody>
          ${streams.map((s) => html`<tr>
            <td>${s.name}</td><td>${s.key}</td><td>${s.type}</td>
            <td class="number">${count(s.records_count)}</td>
            <td>${s.type === "bank_feed" ? html`<${Balance} day=${s.latest_balance} />` : "—"}</td>
            <td><button type="button" class="small" aria-pressed=${listed === s.key ? "true" : "false"}
                        onClick=${() => onList(s.key)} aria-label=${`Imports of ${s.name}`}>Imports</button></td>
          </tr>`)}
        </tbody>
      </table>
    </section>`;
}

// #/imports/<id> opens with that import shown (a link from another page).
const linked = (route) => (route && /^\d+$/.test(route.path[0] || "") ? Number(route.path[0]) : null);

export function ImportsPage({ route }) {
  const streams = useAll("data_streams");
  const [watching, setWatching] = useState(linked(route)); // the import shown: its id
  const [upload, setUpload] = useState(null); // {id, sent, total, done, error} of the file on its way
  const [listed, setListed] = useState(null); // the stream whose imports are listed
  const [ended, setEnded] = useState(0);
  const xhr = useRef(null);

  useEffect(() => () => xhr.current?.abort(), []); // leaving the page stops an upload on its way
  useEffect(() => { if (linked(route)) setWatching(linked(route)); }, [route && route.key]);

  if (streams.error) return html`<${Problem} error=${streams.error} what="load the data streams" />`;
  if (!streams.data) return html`<p>Loading data streams…</p>`;
  const list = streams.data.data;

  const started = (job, streamKey) => {
    setWatching(job.id);
    setListed(streamKey);
    setUpload({ id: job.id, sent: 0, total: 0 });
  };
  const send = async (job, file) => {
    setUpload({ id: job.id, sent: 0, total: file.size });
    try {
      await putFile(job.upload_url, file, (sent, total) => setUpload({ id: job.id, sent, total }),
        (request) => { xhr.current = request; });
      setUpload({ id: job.id, sent: file.size, total: file.size, done: true });
    } catch (problem) {
      if (problem.name !== "AbortError") {
        // The import waits for a file that will not come: it is cancelled at once (the Cancel button stays
        // while it is pending, should this fail too).
        setUpload((u) => ({ ...u, error: `Upload failed: ${problem.message}. Cancelling the import…` }));
        let outcome = "the import is cancelled; choose the file again to retry";
        try {
          await api(`file_imports/${job.id}/cancel`, { method: "POST" });
        } catch (refused) {
          outcome = `the import could not be cancelled (${refused.message}): use Cancel import`;
        }
        setUpload((u) => ({ ...u, error: `Upload failed: ${problem.message}; ${outcome}.` }));
      }
      throw problem;
    } finally {
      xhr.current = null;
    }
  };
  const show = (id) => { setWatching(id); setUpload(null); };
  const listedStream = list.find((s) => s.key === listed);

  return html`
    ${can("preparer") && (list.length
      ? html`<${ImportForm} streams=${list} onStarted=${started} onUpload=${send} />`
      : html`<p>Create a data stream first (Settings): a file is imported into one.</p>`)}
    ${watching && html`<${ImportWatch} key=${watching} id=${watching} upload=${upload && upload.id === watching ? upload : null}
      streams=${list} onCancel=${() => xhr.current?.abort()} onEnded=${() => { setEnded((n) => n + 1); streams.reload(); }} />`}
    ${list.length ? html`<${Streams} streams=${list} listed=${listed} onList=${(key) => setListed(key === listed ? null : key)} />`
      : html`<p>No data streams yet.</p>`}
    ${listedStream && html`<${StreamImports} key=${listedStream.key} stream=${listedStream} onShow=${show} reloadKey=${ended} />`}
    ${listedStream && listedStream.type === "bank_feed" && html`<${StatementDays} key=${`days-${listedStream.key}`} stream=${listedStream} reloadKey=${ended} />`}`;
}
