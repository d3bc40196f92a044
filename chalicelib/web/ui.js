// Components every page uses: money and times as the house shows them, a list loaded from the API,
// cursor paging, and a status line that screen readers announce.
import { useCallback, useEffect, useState } from "preact/hooks";
import { api, html, localTime, money } from "./api.js";

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
// {loading, error, data, reload}.
export function useApi(path) {
  const [state, setState] = useState({ loading: true });
  const [tick, setTick] = useState(0);
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
  return { ...state, reload };
}

// What a failed call said, where the person looks.
export function Problem({ error, what }) {
  if (!error) return null;
  return html`<p class="error" role="alert">Could not ${what}: ${error.message}</p>`;
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
