// Components every page uses: money and times as the house shows them, a list loaded from the API,
// cursor paging, and a status line that screen readers announce.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { api, html, localTime, money, query } from "./api.js";

// An amount with its currency; the minor units on hover.
export function Money({ amount, places, currency }) {
  return html`<span class="money" title=${amount === undefined || amount === null ? undefined : `${amount} minor units`}>${money(amount, places, currency)}</span>`;
}

// A time in the person's time zone, the stored value on hover.
export function When({ iso }) {
  if (!iso) return html`<span>—</span>`;
  return html`<time datetime=${iso} title=${iso}>${localTime(iso)}</time>`;
}

// The answer of GET `path`, reloaded when `path` changes or reload() is called:
// {loading, error, data, reload, refresh}. reload() drops a read in flight and asks again; refresh(signal)
// reads it once more beside it (for usePoll): its answer replaces the data, a failure is thrown to the
// caller and the data shown stays.
export function useApi(path) {
  const [state, setState] = useState({ loading: true });
  const [tick, setTick] = useState(0);
  const pathRef = useRef(path);
  pathRef.current = path;
  useEffect(() => {
    if (!path) return undefined;
    const abort = new AbortController();
    setState((before) => ({ ...before, loading: true, error: undefined }));
    api(path, { signal: abort.signal })
      .then((data) => setState({ loading: false, data }))
      .catch((error) => { if (error.name !== "AbortError") setState({ loading: false, error }); });
    return () => abort.abort();
  }, [path, tick]);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  const refresh = useCallback(async (signal) => {
    const asked = pathRef.current;
    if (!asked) return undefined;
    const data = await api(asked, { signal });
    if (pathRef.current === asked) setState({ loading: false, data });
    return data;
  }, []);
  return { ...state, reload, refresh };
}

// The most a cursor list answers at once (`limit` 1..200): pickers read every page of it.
export const LIST_PAGE = 200;

// Every item of a cursor list (`path` with its filters, no limit or cursor: "users",
// "data_streams?type=bank_feed"), read a page at a time by following `next_cursor` until it is null.
// A cursor answered twice, or more than `maxPages` pages, throws an Error naming the list (a partial
// list is never passed off as the whole one). A capped read (`capped: true`) instead stops after
// `maxPages` pages and answers {items, complete}: complete is false when pages were left unread.
export async function readAll(path, { signal, pageSize = LIST_PAGE, maxPages = 1000, capped = false } = {}) {
  const items = [];
  const seen = new Set();
  let cursor;
  const join = path.includes("?") ? "&" : "?";
  for (let pages = 1; ; pages += 1) {
    const page = await api(`${path}${join}${query({ limit: pageSize, cursor }).slice(1)}`, { signal });
    items.push(...page.data);
    if (!page.next_cursor) return capped ? { items, complete: true } : items;
    if (seen.has(page.next_cursor)) throw new Error(`The list ${path} answered the same cursor twice; it could not be read in full.`);
    if (pages >= maxPages) {
      if (capped) return { items, complete: false };
      throw new Error(`The list ${path} has more than ${maxPages} pages; it was not read in full.`);
    }
    seen.add(page.next_cursor);
    cursor = page.next_cursor;
  }
}

// Like useApi, for a picker's list: every page of `path` (readAll), answered once all of it is in (a
// select is not redrawn under the person's hand as pages arrive), as {data: {data: [...]}, ...}.
export function useAll(path) {
  const [state, setState] = useState({ loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!path) return undefined;
    const abort = new AbortController();
    readAll(path, { signal: abort.signal })
      .then((items) => setState({ loading: false, data: { data: items } }))
      .catch((error) => { if (error.name !== "AbortError") setState({ loading: false, error }); });
    return () => abort.abort();
  }, [path, tick]);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  return { ...state, reload };
}

// Calls `read(signal)` every `ms` while `active`, each time `ms` after the previous answer is in (never
// two reads at once, so a slow service is not asked faster than it answers). A failed read is tried
// again at the next turn; `read` says so itself if it should. Leaving, or `active` turning false, stops it
// and aborts a read in flight.
export function usePoll(read, ms, active) {
  const latest = useRef(read);
  latest.current = read;
  useEffect(() => {
    if (!active) return undefined;
    let timer = null;
    let stopped = false;
    const abort = new AbortController();
    const turn = async () => {
      try { await latest.current(abort.signal); } catch { /* tried again at the next turn */ }
      if (!stopped) timer = setTimeout(turn, ms);
    };
    timer = setTimeout(turn, ms);
    return () => { stopped = true; clearTimeout(timer); abort.abort(); };
  }, [active, ms]);
}

// A ref that is true while the component is on the page: a loop of requests stops once it is false.
export function useMounted() {
  const mounted = useRef(true);
  useEffect(() => { mounted.current = true; return () => { mounted.current = false; }; }, []);
  return mounted;
}

// "1 record", "3 records".
export const plural = (n, one, many = `${one}s`) => `${n} ${Number(n) === 1 ? one : many}`;

// How long a run took (or has taken so far): "42 s", "3 min 5 s"; "—" before it started.
export function duration(run, now = new Date()) {
  if (!run.started_at) return "—";
  const end = run.completed_at ? new Date(run.completed_at) : now;
  const seconds = Math.max(0, Math.round((end - new Date(run.started_at)) / 1000));
  return seconds < 60 ? `${seconds} s` : `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

// Goes to a page of the app: go("#/matches", {status: "proposed"}) -> #/matches?status=proposed.
export function go(hash, params = {}) {
  location.hash = `${hash}${query(params)}`;
}

// A filter's option for the value a link applies (`value`) when its list has not brought it (yet): such
// lists load page by page after the rows, and a filter form shown or sent meanwhile must show and keep
// the link's filter, not "All".
export function appliedOption(value, listed, label) {
  return value && !listed ? html`<option value=${value} selected>${label}</option>` : null;
}

// What a failed call said, where the person looks.
// Each field the service named (a 422's `errors`) is listed under it.
export function Problem({ error, what }) {
  if (!error) return null;
  const fields = error.errors || [];
  if (!fields.length) return html`<p class="error" role="alert">Could not ${what}: ${error.message}</p>`;
  return html`<div class="error" role="alert"><p>Could not ${what}: ${error.message}</p>
    <ul>${fields.map((e) => html`<li><code>${e.field}</code>: ${e.message}</li>`)}</ul></div>`;
}

// A status line announced politely (saved, started, …).
export function Status({ text }) {
  return html`<p class="status" role="status">${text || ""}</p>`;
}

// Cursor paging of a list route: `cursors` is the stack of cursors of the pages before this one.
export function usePaging() {
  const [cursors, setCursors] = useState([]);
  const cursor = cursors[cursors.length - 1];
  return {
    cursor,
    page: cursors.length + 1,
    next: (nextCursor) => setCursors((stack) => [...stack, nextCursor]),
    previous: () => setCursors((stack) => stack.slice(0, -1)),
    reset: () => setCursors([]),
  };
}

export function Pager({ paging, nextCursor, label }) {
  return html`
    <nav class="pager" aria-label=${`${label} pages`}>
      <button type="button" onClick=${paging.previous} disabled=${paging.page === 1}>Previous</button>
      <span>Page ${paging.page}</span>
      <button type="button" onClick=${() => paging.next(nextCursor)} disabled=${!nextCursor}>Next</button>
    </nav>`;
}

// One action at a time: run(call, done) awaits call(); done(answer) says what happened (a status line).
// A 422's errors go beside the fields they name (`fields` lists them: "events[0]" belongs to
// "events"); the rest, and every other refusal (409: the last admin, a duplicate), is an alert.
export function useAction(fields = []) {
  const [state, setState] = useState({ busy: false, status: "", alert: "", errors: {} });
  async function run(call, done) {
    if (state.busy) return undefined;
    setState({ busy: true, status: "", alert: "", errors: {} });
    try {
      const answer = await call();
      setState({ busy: false, status: done ? done(answer) : "", alert: "", errors: {} });
      return answer;
    } catch (error) {
      const { errors, elsewhere } = placeErrors(error, fields);
      const placed = Object.keys(errors).length > 0;
      const alert = placed && !elsewhere.length ? "" : [error.message, ...elsewhere].join("; ");
      setState({ busy: false, status: "", alert, errors });
      return undefined;
    }
  }
  const clear = () => setState({ busy: false, status: "", alert: "", errors: {} });
  // Once the person edits the form again, an alert or a status about the last try is stale (the
  // errors beside fields stay until the next try).
  const edited = () => { if (state.alert || state.status) setState((s) => ({ ...s, status: "", alert: "" })); };
  return { ...state, run, clear, edited };
}

// A refusal's field errors (a 422's `errors`) by the form field they belong to: `fields` lists them, and
// "events[0]" or "events.x" belongs to "events". {errors: {field: message}, elsewhere: ["field: message"]}.
export function placeErrors(error, fields) {
  const errors = {};
  const elsewhere = [];
  for (const e of error.errors || []) {
    const field = fields.find((f) => e.field === f || e.field.startsWith(`${f}[`) || e.field.startsWith(`${f}.`));
    if (field && !errors[field]) errors[field] = e.message;
    else elsewhere.push(`${e.field}: ${e.message}`);
  }
  return { errors, elsewhere };
}

// The attributes of a control whose field the service refused: its message is read with it.
export function invalid(id, message) {
  return message ? { "aria-invalid": "true", "aria-describedby": `${id}-error` } : {};
}

export function FieldError({ id, message }) {
  return message ? html`<p class="field-error" id=${`${id}-error`}>${message}</p>` : null;
}

// An action's outcome: the status line (announced politely) and the alert (announced at once).
export function Outcome({ action }) {
  return html`
    <p class="status" role="status">${action.status}</p>
    ${action.alert && html`<p class="error" role="alert">${action.alert}</p>`}`;
}

// A secret the service answers once (an API key, a webhook's signing secret): kept in this component's
// state only, so it is gone once the person dismisses it or leaves the section, and never fetched again.
export function OnceSecret({ id, title, what, secret, onDone }) {
  const [copied, setCopied] = useState("");
  const field = useRef(null);
  useEffect(() => { field.current?.focus(); field.current?.select(); }, [secret]);
  async function copy() {
    try {
      await navigator.clipboard.writeText(secret);
      setCopied("Copied to the clipboard.");
    } catch {
      field.current?.select();
      setCopied("The browser did not allow copying: the secret is selected, copy it with the keyboard.");
    }
  }
  return html`
    <div class="once-secret" role="region" aria-labelledby=${`${id}-title`}>
      <h3 id=${`${id}-title`}>${title}</h3>
      <p class="warning" id=${`${id}-warning`}><strong>Copy it now.</strong> This is the only time it is shown: it
        is not stored anywhere it can be read again, and it is gone once you leave this page.</p>
      <label for=${id}>${what}</label>
      <div class="secret-row">
        <input id=${id} ref=${field} class="secret" readonly value=${secret} aria-describedby=${`${id}-warning`}
               spellcheck="false" autocomplete="off" />
        <button type="button" onClick=${copy}>Copy</button>
      </div>
      <p class="status" role="status">${copied}</p>
      <button type="button" class="secondary" onClick=${onDone}>Done, I have kept it</button>
    </div>`;
}

// A button that asks before it acts: the first press shows the question with "Yes" and "Cancel".
// The focus follows: to "Yes" when asked, back to the first button on Cancel. `name` is the first
// button's accessible name when its text alone is not enough ("Delete" -> "Delete <rule>"); while
// `disabled` or `busy` a press does nothing (aria-disabled: the button keeps the focus). onYes() answers
// true when done (the question goes), false to keep asking (its failure is shown by the caller).
// `children` (a reason's labelled field) show inside the question, and the focus goes to their first
// field instead of "Yes"; Escape inside the question is Cancel.
export function Confirm({ label, name, question, yes, onYes, busy, disabled, children }) {
  const [asking, setAsking] = useState(false);
  const yesButton = useRef(null);
  const askButton = useRef(null);
  const group = useRef(null);
  const wasAsking = useRef(false);
  useEffect(() => {
    if (asking) (group.current?.querySelector("textarea, input, select") || yesButton.current)?.focus();
    else if (wasAsking.current) askButton.current?.focus();
    wasAsking.current = asking;
  }, [asking]);
  if (!asking) {
    return html`<button type="button" ref=${askButton} class="danger" aria-label=${name}
      aria-disabled=${disabled || busy ? "true" : undefined}
      onClick=${() => { if (!disabled && !busy) setAsking(true); }}>${label}</button>`;
  }
  return html`
    <span class="confirm" role="group" aria-label=${question} ref=${group}
          onKeyDown=${(e) => { if (e.key === "Escape") { e.preventDefault(); setAsking(false); } }}>
      <span>${question}</span>
      ${children}
      <button type="button" ref=${yesButton} class="danger" aria-disabled=${busy ? "true" : undefined}
              onClick=${async () => { if (!busy && await onYes()) setAsking(false); }}>${yes}</button>
      <button type="button" class="secondary" onClick=${() => setAsking(false)}>Cancel</button>
    </span>`;
}
