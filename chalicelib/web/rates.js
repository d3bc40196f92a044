// Rates (#/rates): the environment's rate streams, reference exchange rates that rules converting
// currencies read (docs/currencies.md). Each stream with its pairs and the dates each covers; admins
// create a stream, preparers import a CSV of date, base, quote, rate (all rows stored or none: a 422
// names each refused row). Rates are exact decimals kept as the text the service answers: no float.
import { useEffect, useState } from "preact/hooks";
import { api, can, html } from "./api.js";
import { FieldError, invalid, Outcome, plural, Problem, Status, useAction, useApi, When } from "./ui.js";

const MAX_CSV_CHARACTERS = 1000000; // the API's limit (ImportRates.csv)

// A stream's rates (sorted by pair, then date) as one line a pair: first and last date, how many, the last rate.
export function pairsOf(rates) {
  const pairs = new Map();
  for (const r of rates) {
    const pair = `${r.base}/${r.quote}`;
    const seen = pairs.get(pair);
    if (!seen) pairs.set(pair, { pair, from: r.date, to: r.date, count: 1, latest: r.rate });
    else {
      seen.count += 1;
      if (r.date < seen.from) seen.from = r.date;
      if (r.date >= seen.to) { seen.to = r.date; seen.latest = r.rate; }
    }
  }
  return [...pairs.values()].sort((x, y) => x.pair.localeCompare(y.pair));
}

function Pairs({ stream, tick }) {
  const [state, setState] = useState({ loading: true });
  useEffect(() => {
    const abort = new AbortController();
    setState((before) => ({ ...before, loading: true }));
    api(`rate_streams/${encodeURIComponent(stream.key)}/rates`, { signal: abort.signal })
      .then((page) => setState({ pairs: pairsOf(page.data) }))
      .catch((error) => { if (error.name !== "AbortError") setState({ error }); });
    return () => abort.abort();
  }, [stream.key, stream.rates_count, tick]);
  if (state.error) return html`<${Problem} error=${state.error} what="load its rates" />`;
  if (!state.pairs) return html`<span>Loading pairs…</span>`;
  if (!state.pairs.length) return html`<span class="muted">No rates yet.</span>`;
  return html`<ul class="pairs" aria-label=${`Pairs of ${stream.name}`}>${state.pairs.map((p) => html`
    <li key=${p.pair} data-pair=${p.pair}><strong>${p.pair}</strong>${`: ${p.from === p.to ? p.from : `${p.from} to ${p.to}`} (${plural(p.count, "rate")}, latest ${p.latest})`}</li>`)}</ul>`;
}

function CreateStream({ onCreated }) {
  const action = useAction(["key", "name", "description"]);
  async function submit(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const data = new FormData(form);
    const made = await action.run(() => api("rate_streams", { method: "POST", body: {
      key: data.get("key"), name: data.get("name"), description: data.get("description") || undefined } }),
    (s) => `Rate stream “${s.name}” (${s.key}) created.`);
    if (made) { form.reset(); onCreated(made); }
  }
  const e = action.errors;
  return html`
    <form class="settings-form" onSubmit=${submit} onInput=${action.edited} novalidate aria-labelledby="rate-stream-title">
      <h3 id="rate-stream-title">Create a rate stream</h3>
      <div class="fields">
        <div>
          <label for="rate-stream-key">Key</label>
          <input id="rate-stream-key" name="key" autocomplete="off" aria-describedby="rate-stream-key-hint" ...${invalid("rate-stream-key", e.key)} />
          <p class="hint" id="rate-stream-key-hint">a-z, 0-9, _ and -; a converting rule names it.</p>
          <${FieldError} id="rate-stream-key" message=${e.key} />
        </div>
        <div>
          <label for="rate-stream-name">Name</label>
          <input id="rate-stream-name" name="name" autocomplete="off" ...${invalid("rate-stream-name", e.name)} />
          <${FieldError} id="rate-stream-name" message=${e.name} />
        </div>
        <div class="wide">
          <label for="rate-stream-description">Description</label>
          <input id="rate-stream-description" name="description" autocomplete="off" ...${invalid("rate-stream-description", e.description)} />
          <${FieldError} id="rate-stream-description" message=${e.description} />
        </div>
      </div>
      <button type="submit" aria-disabled=${action.busy ? "true" : undefined}>Create rate stream</button>
      <${Outcome} action=${action} />
    </form>`;
}

// "csv.rows[3].rate" -> {row: 3, field: "rate"}; null for an error of the whole file.
const rowOf = (field) => {
  const found = /^csv\.rows\[(\d+)\]\.?(.*)$/.exec(field || "");
  return found ? { row: Number(found[1]), field: found[2] || "row" } : null;
};

function ImportRates({ streams, chosenKey, onImported }) {
  const [key, setKey] = useState(chosenKey || "");
  const [text, setText] = useState("");
  const [fileName, setFileName] = useState("");
  const [busy, setBusy] = useState(false);
  const [failure, setFailure] = useState(null);
  const [here, setHere] = useState("");
  const [result, setResult] = useState(null);
  useEffect(() => { if (!key && streams.length) setKey(streams[0].key); }, [streams.length]);

  async function readFile(event) {
    const file = event.currentTarget.files[0];
    setHere("");
    if (!file) return;
    if (file.size > MAX_CSV_CHARACTERS * 4) { setHere(`${file.name} is too large: at most ${MAX_CSV_CHARACTERS.toLocaleString()} characters.`); return; }
    setFileName(file.name);
    setText(await file.text());
  }

  async function submit(event) {
    event.preventDefault();
    if (busy) return;
    setFailure(null);
    setResult(null);
    if (!key) { setHere("Choose a rate stream."); return; }
    if (!text.trim()) { setHere("Choose a CSV file, or paste its text."); document.getElementById("rates-csv")?.focus(); return; }
    if (text.length > MAX_CSV_CHARACTERS) { setHere(`The CSV is too large: at most ${MAX_CSV_CHARACTERS.toLocaleString()} characters (10,000 rows).`); return; }
    setHere("");
    setBusy(true);
    try {
      const answer = await api(`rate_streams/${encodeURIComponent(key)}/rates`, { method: "POST", body: { csv: text } });
      setResult(answer);
      onImported(answer);
    } catch (problem) {
      setFailure(problem);
    } finally {
      setBusy(false);
      setTimeout(() => document.getElementById("rates-import-outcome")?.focus(), 0);
    }
  }

  const unchanged = result ? result.results.filter((r) => r.status === "unchanged").length : 0;
  const refusedRows = failure ? (failure.errors || []).map((e) => ({ ...e, at: rowOf(e.field) })) : [];
  return html`
    <form class="settings-form" onSubmit=${submit} novalidate aria-labelledby="rates-import-title">
      <h3 id="rates-import-title">Import rates</h3>
      <p class="hint" id="rates-csv-hint">A CSV whose header names the columns <code>date</code>, <code>base</code>, <code>quote</code>
        and <code>rate</code> (any order): one base is worth rate of quote on date, e.g. <code>2026-03-02,EUR,USD,1.0842</code>.
        Every row is checked first: when one is refused, nothing is stored. A rate of a day and pair already held is replaced.</p>
      <div class="fields">
        <div>
          <label for="rates-stream">Rate stream</label>
          <select id="rates-stream" value=${key} onChange=${(e) => setKey(e.currentTarget.value)}>
            ${streams.map((s) => html`<option value=${s.key}>${s.name} (${s.key})</option>`)}
          </select>
        </div>
        <div>
          <label for="rates-file">CSV file</label>
          <input id="rates-file" type="file" accept=".csv,text/csv" onChange=${readFile} aria-describedby="rates-csv-hint" />
        </div>
        <div class="wide">
          <label for="rates-csv">CSV text${fileName ? ` (from ${fileName})` : ""}</label>
          <textarea id="rates-csv" rows="6" spellcheck="false" value=${text} aria-describedby="rates-csv-hint"
            onInput=${(e) => { setText(e.currentTarget.value); setFileName(""); }}></textarea>
        </div>
      </div>
      ${here && html`<p class="error" role="alert">${here}</p>`}
      <button type="submit" aria-disabled=${busy ? "true" : undefined}>${busy ? "Importing…" : "Import rates"}</button>
      <div id="rates-import-outcome" tabindex="-1" data-testid="rates-import-outcome">
        ${result && html`<p class="status" role="status">${`Imported ${plural(result.rows, "row")} into ${result.rate_stream.name}: `
          + `${result.created} created, ${result.replaced} replaced, ${unchanged} unchanged. The stream holds ${plural(result.rate_stream.rates_count, "rate")}.`}</p>
          <div class="rate-results"><table>
            <caption class="visually-hidden">Each row's result</caption>
            <thead><tr><th scope="col" class="number">Row</th><th scope="col">Date</th><th scope="col">Pair</th>
              <th scope="col" class="number">Rate</th><th scope="col">Result</th><th scope="col" class="number">Before</th></tr></thead>
            <tbody>${result.results.map((r) => html`<tr key=${r.row} data-row=${r.row}><td class="number">${r.row}</td><td>${r.date}</td>
              <td>${r.base}/${r.quote}</td><td class="number">${r.rate}</td><td>${r.status}</td>
              <td class="number">${r.previous_rate || "—"}</td></tr>`)}</tbody>
          </table></div>`}
        ${failure && html`<div class="error" role="alert">
          <p>Nothing was imported: ${refusedRows.length ? `${plural(refusedRows.length, "problem")} in the file.` : failure.message}</p>
          ${refusedRows.length > 0 && html`<ul class="refused-rows">${refusedRows.map((e, i) => html`<li key=${i} data-field=${e.field}>${e.at
            ? `Row ${e.at.row}, ${e.at.field}: ${e.message}` : `${e.field}: ${e.message}`}</li>`)}</ul>`}
        </div>`}
      </div>
    </form>`;
}

export function RatesPage() {
  const { data, error, loading, reload } = useApi("rate_streams");
  const [tick, setTick] = useState(0);
  const [status, setStatus] = useState("");
  const streams = data ? data.data : [];
  return html`
    <p class="hint">Reference exchange rates: a rule that converts currencies reads the rate of each record's date from one
      of these streams, and each match it makes says the rate it used.</p>
    ${can("admin") && html`<${CreateStream} onCreated=${() => reload()} />`}
    <section aria-labelledby="rate-streams-title">
      <h2 id="rate-streams-title">Rate streams</h2>
      <${Problem} error=${error} what="load the rate streams" />
      ${loading && !data && html`<p>Loading rate streams…</p>`}
      ${data && !streams.length && html`<p>No rate stream yet${can("admin") ? "" : ": an admin creates one"}.</p>`}
      ${streams.length > 0 && html`
        <table class="rate-streams">
          <caption class="visually-hidden">Rate streams with their pairs and the dates each covers</caption>
          <thead><tr><th scope="col">Name</th><th scope="col">Key</th><th scope="col" class="number">Rates</th>
            <th scope="col">Pairs and dates</th><th scope="col">Created</th></tr></thead>
          <tbody>${streams.map((s) => html`<tr key=${s.key} data-key=${s.key}>
            <td>${s.name}${s.description ? html`<div class="muted">${s.description}</div>` : ""}</td>
            <td><code>${s.key}</code></td><td class="number">${s.rates_count}</td>
            <td><${Pairs} stream=${s} tick=${tick} /></td><td><${When} iso=${s.created_at} /></td></tr>`)}</tbody>
        </table>`}
    </section>
    ${can("preparer") && streams.length > 0 && html`<${ImportRates} streams=${streams}
      onImported=${(answer) => { setStatus(`${answer.rate_stream.name} holds ${plural(answer.rate_stream.rates_count, "rate")}.`);
        setTick((n) => n + 1); reload(); }} />`}
    <${Status} text=${status} />`;
}
