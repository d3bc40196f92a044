// What every page of the web app shares: the session, calls to the API, and how money, dates and
// roles read. Pages import from here and from ui.js; none of them talks to fetch() itself.
import { h } from "preact";
import htm from "htm";

export const html = htm.bind(h);

let current = null; // {id_token, access_token, expires_in, user, until}: in memory only
export const session = () => current;
export function setSession(value) { current = value; }

// The roles of the API, weakest first: a control a role may not use is not offered (the API refuses
// it again).
export const ROLES = ["viewer", "preparer", "approver", "admin"];
export const can = (role) => current !== null && ROLES.indexOf(current.user.role) >= ROLES.indexOf(role);

export class ApiError extends Error {
  constructor(status, answer) {
    super(answer.message || `the service answered ${status}`);
    this.status = status;
    this.errors = answer.errors || [];
  }
}

// Integers past 2^53 would round in a JavaScript number: they are read as BigInt from their own digits
// (JSON.parse's source text), so an amount or a sum is never shown off by a unit.
function parseJson(text) {
  return JSON.parse(text, (key, value, context) =>
    (typeof value === "number" && !Number.isSafeInteger(value) && context && /^-?\d+$/.test(context.source)
      ? BigInt(context.source) : value));
}

// A call to the API (path relative to /v1, e.g. "exceptions?status=open"), with the person's token.
// Answers the parsed body ({} for 204); throws ApiError with the service's message otherwise.
export async function api(path, { method = "GET", body, signal } = {}) {
  const headers = { Authorization: `Bearer ${current.id_token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = response.status === 204 ? "" : await response.text();
  let answer = {};
  try { answer = text ? parseJson(text) : {}; } catch { answer = {}; }
  if (!response.ok) throw new ApiError(response.status, answer);
  return answer;
}

// The words for an action a reconciliation's approval policy held (the service answered 202 with the
// approval, docs/approvals.md), or null when the action was done.
export function heldForApproval(answer) {
  if (!answer || answer.status !== "pending" || typeof answer.url !== "string" || !/\/approvals\/\d+$/.test(answer.url)) return null;
  return `Sent for approval: approval ${answer.id} waits for an approver other than you. Nothing has changed yet.`;
}

// A query string from an object, leaving out empty values: query({status: "open", q: ""}) -> "?status=open".
export function query(params) {
  const kept = Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== "");
  return kept.length ? `?${new URLSearchParams(kept.map(([k, v]) => [k, String(v)]))}` : "";
}

// Minor units to a decimal string with its currency, in integers only: (123456, 2, "USD") -> "1,234.56 USD".
export function money(amount, decimalPlaces = 2, currency = "") {
  if (amount === undefined || amount === null) return "—";
  let digits = BigInt(amount);
  const negative = digits < 0n;
  if (negative) digits = -digits;
  const places = Number(decimalPlaces || 0);
  const text = digits.toString().padStart(places + 1, "0");
  const whole = text.slice(0, text.length - places).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const fraction = places ? `.${text.slice(text.length - places)}` : "";
  return `${negative ? "-" : ""}${whole}${fraction}${currency ? ` ${currency}` : ""}`;
}

// A decimal string a person typed ("1,234.5") to minor units (123450n), or null when it is no amount.
export function minorUnits(text, decimalPlaces = 2) {
  const match = /^\s*(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?\s*$/.exec(text || "");
  if (!match || (match[2] || "").length > decimalPlaces) return null;
  return BigInt(match[1].replaceAll(",", "") + (match[2] || "").padEnd(decimalPlaces, "0"));
}

// A rate from two integer counts, to one decimal, without floating point: (1234, 1500) -> "82.2%".
export function percent(part, total) {
  if (!total) return "—";
  const tenths = (BigInt(part) * 1000n) / BigInt(total);
  return `${tenths / 10n}.${tenths % 10n}%`;
}

// A stored timestamp in the person's time zone ("29 Nov 2026, 14:05"); dates (YYYY-MM-DD) stay as stored.
export function localTime(iso) {
  if (!iso) return "—";
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

export function hhmm(iso) {
  const when = new Date(iso);
  return `${String(when.getHours()).padStart(2, "0")}:${String(when.getMinutes()).padStart(2, "0")}`;
}
