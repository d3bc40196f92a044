// The finance team's web app (docs/web-app.md): Preact and htm as ES modules, no build step. The page
// keeps the id and access tokens in memory only; the refresh token is an HttpOnly cookie that only
// /v1/session reads. Every URL here is relative to the page (…/v1/app), so it works under any stage.
import { render } from "preact";
import { useCallback, useEffect, useState } from "preact/hooks";
import { api, hhmm, html, session as currentSession, setSession as keepSession } from "./api.js";
import { AgentsPage } from "./agents.js";
import { ApprovalsPage } from "./approvals.js";
import { ExceptionsPage } from "./exceptions.js";
import { ImportsPage } from "./imports.js";
import { MatchesPage } from "./matches.js";
import { OverviewPage } from "./overview.js";
import { RatesPage } from "./rates.js";
import { ReconciliationsPage } from "./reconciliations.js";
import { SettingsPage } from "./settings.js";
import { StoriesPage } from "./stories.js";

// The pages, in the navigation's order; `role` is the least role that sees one.
const PAGES = [
  { id: "overview", label: "Overview", Page: OverviewPage },
  { id: "exceptions", label: "Exceptions", Page: ExceptionsPage },
  { id: "matches", label: "Matches", Page: MatchesPage },
  { id: "approvals", label: "Approvals", Page: ApprovalsPage },
  { id: "reconciliations", label: "Reconciliations", Page: ReconciliationsPage },
  { id: "imports", label: "Imports", Page: ImportsPage },
  { id: "rates", label: "Rates", Page: RatesPage },
  { id: "stories", label: "Stories", Page: StoriesPage },
  { id: "agents", label: "Agents", Page: AgentsPage },
  { id: "settings", label: "Settings", Page: SettingsPage, role: "admin" },
];
const REFRESH_MARGIN_MS = 60 * 1000; // refreshed a minute before the tokens expire
const RETRY_FIRST_MS = 5 * 1000; // a refresh the service could not do (0, 429, 5xx) is tried again,
const RETRY_MAX_MS = 60 * 1000; // doubling the wait, until the tokens really expire

let refreshTimer = null;

async function sessionCall(method, path, body, extraHeaders) {
  // Same-origin fetch sends our Origin; the JSON content type is what the session routes require.
  const response = await fetch(path, {
    method, credentials: "same-origin",
    headers: { "Content-Type": "application/json", ...(extraHeaders || {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = response.status === 204 ? {} : await response.json().catch(() => ({}));
  return { status: response.status, answer };
}

// "#/exceptions/exc_1?status=open" -> {page: "exceptions", path: ["exc_1"], params: URLSearchParams, key}.
function readRoute() {
  const [where, search = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const [page = "", ...path] = where.split("/").filter(Boolean).map(decodeURIComponent);
  return { page: page || "overview", path, params: new URLSearchParams(search), key: location.hash };
}

function useHashRoute() {
  const read = readRoute;
  const [route, setRoute] = useState(read());
  useEffect(() => {
    const changed = () => setRoute(read());
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  return route;
}

function SignIn({ onSignedIn, ended, notice }) {
  const [needsNewPassword, setNeedsNewPassword] = useState(false);
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);

  // The new password's field is where the person goes next (a screen reader announces it too).
  useEffect(() => { if (needsNewPassword) document.getElementById("new_password")?.focus(); }, [needsNewPassword]);

  async function submit(event) {
    event.preventDefault();
    if (busy) return; // aria-disabled, not disabled: the button keeps its focus and is still announced
    const form = new FormData(event.currentTarget);
    const body = { email: form.get("email"), password: form.get("password") };
    if (needsNewPassword) body.new_password = form.get("new_password");
    setBusy(true);
    setError("");
    const { status, answer } = await sessionCall("POST", "session", body).catch(() => ({ status: 0, answer: {} }));
    setBusy(false);
    if (status === 200) return onSignedIn(answer);
    if (status === 409) {
      setNeedsNewPassword(true);
      return setError("This is your first sign-in: choose a password of your own.");
    }
    setError(answer.message ? `Sign-in failed: ${answer.message}.` : "Sign-in failed: the service did not answer.");
  }

  return html`
    <main>
      <section class="card sign-in" aria-labelledby="sign-in-title">
        <h1 id="sign-in-title">Sign in</h1>
        ${ended && html`<p class="banner" role="status">Your session has ended. Sign in again to go on.</p>`}
        ${notice && html`<p class="banner" role="status">${notice}</p>`}
        <form onSubmit=${submit} novalidate>
          <label for="email">Email</label>
          <input id="email" name="email" type="email" autocomplete="username" required />
          <label for="password">${needsNewPassword ? "Temporary password" : "Password"}</label>
          <input id="password" name="password" type="password" autocomplete="current-password" required />
          ${needsNewPassword && html`
            <label for="new_password">New password</label>
            <input id="new_password" name="new_password" type="password" autocomplete="new-password" required
                   aria-describedby="new-password-rule" />
            <p id="new-password-rule">At least 12 characters, with upper and lower case letters and a digit.</p>`}
          <p class="error" role="alert">${error}</p>
          <button type="submit" aria-disabled=${busy ? "true" : undefined}>${needsNewPassword ? "Set password and sign in" : "Sign in"}</button>
        </form>
      </section>
    </main>`;
}

const ORDER = ["viewer", "preparer", "approver", "admin"];
const visiblePages = (role) => PAGES.filter((p) => !p.role || ORDER.indexOf(role) >= ORDER.indexOf(p.role));

// How many approvals are pending: one request (up to 100 of them) at each route change; "100+" beyond.
// A failed read shows no count (the Approvals page says why).
const PENDING_READ = 100;
// A decision made on the Approvals page says "approvals-changed": the count is read again then too.
function usePendingApprovals(routeKey) {
  const [count, setCount] = useState(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const changed = () => setTick((n) => n + 1);
    addEventListener("approvals-changed", changed);
    return () => removeEventListener("approvals-changed", changed);
  }, []);
  useEffect(() => {
    const abort = new AbortController();
    api(`approvals?status=pending&limit=${PENDING_READ}`, { signal: abort.signal })
      .then((page) => setCount(page.next_cursor ? `${PENDING_READ}+` : String(page.data.length)))
      .catch((error) => { if (error.name !== "AbortError") setCount(null); });
    return () => abort.abort();
  }, [routeKey, tick]);
  return count;
}

function Header({ session, route, onSignOut }) {
  const { user } = session;
  const pages = visiblePages(user.role);
  const pending = usePendingApprovals(`${route.page}/${route.path.join("/")}`); // not at each filter change
  return html`
    <header>
      <nav aria-label="Main">
        <ul>
          ${pages.map(({ id, label }) => html`
            <li><a href=${`#/${id}`} aria-current=${route.page === id ? "page" : undefined}>${label}${id === "approvals"
              && pending && pending !== "0" && html` <span class="badge nav-count" data-testid="pending-approvals"><span
                class="visually-hidden">, </span>${pending}<span class="visually-hidden"> pending</span></span>`}</a></li>`)}
        </ul>
      </nav>
      <p class="who">
        <span data-testid="who">${user.name || user.email}</span> · ${user.role} · ${user.environment} ·
        signed in until <time datetime=${session.until}>${hhmm(session.until)}</time>
      </p>
      <button type="button" onClick=${onSignOut}>Sign out</button>
    </header>`;
}

function App() {
  const [session, setSession] = useState(null);
  const [phase, setPhase] = useState("restoring"); // restoring | signed-out | ended | signed-in
  const [notice, setNotice] = useState("");
  const route = useHashRoute();

  // A new page's heading takes the focus (after sign-in and at each route), so keyboard and screen
  // reader users start at the top of what changed.
  useEffect(() => {
    if (phase === "signed-in") document.querySelector("main h1")?.focus();
  }, [phase, route.page, route.path.join("/")]);

  const adopt = useCallback((answer) => {
    // From when the answer arrived, by this browser's clock: the server's may differ.
    const expiresAt = Date.now() + answer.expires_in * 1000;
    const current = { ...answer, until: new Date(expiresAt).toISOString() };
    keepSession(current);
    setSession(current);
    setPhase("signed-in");
    setNotice("");
    clearTimeout(refreshTimer);
    const attempt = async (retryWait) => {
      const { status, answer: fresh } = await sessionCall("POST", "session/refresh").catch(() => ({ status: 0 }));
      if (status === 200) return adopt(fresh);
      // Only a 401 says the session is over; the service or the pool being busy or down does not.
      const passing = status === 0 || status === 429 || status >= 500;
      if (passing && Date.now() + retryWait < expiresAt) {
        refreshTimer = setTimeout(() => attempt(Math.min(retryWait * 2, RETRY_MAX_MS)), retryWait);
        return;
      }
      keepSession(null); setSession(null); setPhase("ended");
    };
    const wait = Math.max(answer.expires_in * 1000 - REFRESH_MARGIN_MS, 5000);
    refreshTimer = setTimeout(() => attempt(RETRY_FIRST_MS), wait);
  }, []);

  useEffect(() => {
    // A reload keeps the session through the cookie: no cookie (or a revoked one) is simply signed out.
    sessionCall("POST", "session/refresh").then(({ status, answer }) => (status === 200 ? adopt(answer) : setPhase("signed-out")),
      () => setPhase("signed-out"));
  }, []);

  async function signOut() {
    clearTimeout(refreshTimer);
    const { status, answer } = await sessionCall("DELETE", "session", undefined,
      { Authorization: `Bearer ${currentSession().access_token}` }).catch(() => ({ status: 0, answer: {} }));
    keepSession(null);
    setSession(null);
    setPhase("signed-out");
    // 503: the cookie is cleared, but the sign-in service was not told; 0: we do not know either way.
    if (status !== 204) {
      setNotice(answer.message
        ? `Signed out here, but not everywhere: ${answer.message}.`
        : "Signed out here, but the service did not answer: your other sessions may stay signed in. Sign in and out again later.");
    }
  }

  if (phase === "restoring") return html`<main><p>Loading…</p></main>`;
  if (phase !== "signed-in") return html`<${SignIn} onSignedIn=${adopt} ended=${phase === "ended"} notice=${notice} />`;
  // A page the person's role does not see (or no page of that name) shows the overview.
  const shown = visiblePages(session.user.role).find((p) => p.id === route.page) || PAGES[0];
  return html`<${Header} session=${session} route=${{ ...route, page: shown.id }} onSignOut=${signOut} />
    <main><h1 tabindex="-1">${shown.label}</h1><${shown.Page} route=${route} session=${session} /></main>`;
}

render(html`<${App} />`, document.getElementById("root"));
