// What the Settings sections share: an action's progress and outcome (the service's 422 errors beside
// their fields, any other refusal as an alert), a secret shown once, and a confirmation step.
import { useEffect, useRef, useState } from "preact/hooks";
import { html } from "./api.js";

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
      const errors = {};
      const elsewhere = [];
      for (const e of error.errors || []) {
        const field = fields.find((f) => e.field === f || e.field.startsWith(`${f}[`) || e.field.startsWith(`${f}.`));
        if (field && !errors[field]) errors[field] = e.message;
        else elsewhere.push(`${e.field}: ${e.message}`);
      }
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
// The focus follows: to "Yes" when asked, back to the first button on Cancel.
export function Confirm({ label, question, yes, onYes, busy }) {
  const [asking, setAsking] = useState(false);
  const yesButton = useRef(null);
  const askButton = useRef(null);
  const wasAsking = useRef(false);
  useEffect(() => {
    if (asking) yesButton.current?.focus();
    else if (wasAsking.current) askButton.current?.focus();
    wasAsking.current = asking;
  }, [asking]);
  if (!asking) {
    return html`<button type="button" ref=${askButton} class="danger" onClick=${() => setAsking(true)}>${label}</button>`;
  }
  return html`
    <span class="confirm" role="group" aria-label=${question}>
      <span>${question}</span>
      <button type="button" ref=${yesButton} class="danger" aria-disabled=${busy ? "true" : undefined}
              onClick=${async () => { if (!busy && await onYes()) setAsking(false); }}>${yes}</button>
      <button type="button" class="secondary" onClick=${() => setAsking(false)}>Cancel</button>
    </span>`;
}
