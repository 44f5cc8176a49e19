// The browser client of tenantd (an ES module; no build step, no dependencies). The source of
// the npm package `tenantd-client` (import from "tenantd-client" or "tenantd-client/browser");
// tenantd serves this very file as /static/tenantd.js.
//
//   import { configure, me, login, logout, switchAccount, notifications, push, request,
//     onSignedOut } from "https://auth.example.com/static/tenantd.js";
//   configure({ baseUrl: "https://auth.example.com" }); // from a page on another origin
//
// Cookies carry the session (HttpOnly; this module never sees a token). `request()` is the
// fetch wrapper every call goes through: on a 401 whose reason is `invalid_session` (or
// `missing_session` once the short-lived access cookie expired) it refreshes the session
// once, single-flight across every tab of this origin (Web Locks, with a BroadcastChannel
// telling the other tabs a refresh just happened), retries the request, and on a second
// failure reports "signed out" to the `onSignedOut` listeners.

const config = { baseUrl: "", fetch: null };
const signedOutListeners = new Set();
const REFRESH_LOCK = "tenantd-refresh";
const REFRESHED_KEY = "tenantd:refreshed-at";
const channel = typeof BroadcastChannel === "function" ? new BroadcastChannel("tenantd") : null;
if (channel && typeof channel.unref === "function") channel.unref(); // Node: never hold the process open
let lastRefreshAt = 0; // the newest refresh any tab finished (ms), as this tab heard it
let refreshing = null; // this tab's refresh in flight (single-flight within the tab)
let signedOut = false;

if (channel) {
  channel.onmessage = (event) => {
    const msg = event.data || {};
    if (msg.type === "refreshed") lastRefreshAt = Math.max(lastRefreshAt, msg.at);
    if (msg.type === "signed-out") announceSignedOut(msg.reason, false);
    if (msg.type === "signed-in") signedOut = false;
  };
}

/**
 * Point the client at another origin (default: the page's own); that origin's tenantd must list
 * this page's origin in ALLOWED_ORIGINS. `fetch`: another fetch (tests, a runtime without
 * cookies in its own).
 */
export function configure(options = {}) {
  if (options.baseUrl !== undefined) config.baseUrl = String(options.baseUrl).replace(/\/$/, "");
  if (options.fetch !== undefined) config.fetch = options.fetch;
}

/** Call `listener(reason)` when the session ends (refresh refused, logout, another tab). */
export function onSignedOut(listener) {
  signedOutListeners.add(listener);
  return () => signedOutListeners.delete(listener);
}

export class ApiError extends Error {
  constructor(status, error) {
    super((error && error.message) || `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.code = (error && error.code) || "HTTP_" + status;
    this.details = (error && error.details) || undefined;
  }
}

function announceSignedOut(reason, broadcast = true) {
  if (signedOut) return;
  signedOut = true;
  if (broadcast && channel) channel.postMessage({ type: "signed-out", reason });
  for (const listener of [...signedOutListeners]) {
    try { listener(reason); } catch (err) { console.error(err); }
  }
}

function readStoredRefresh() {
  try { return Number(localStorage.getItem(REFRESHED_KEY)) || 0; } catch { return 0; }
}

function noteRefreshed(at) {
  lastRefreshAt = Math.max(lastRefreshAt, at);
  try { localStorage.setItem(REFRESHED_KEY, String(at)); } catch { /* private mode */ }
  if (channel) channel.postMessage({ type: "refreshed", at });
}

function send(path, { method = "GET", body, headers = {}, signal } = {}) {
  const init = { method, credentials: "include", headers: { Accept: "application/json", ...headers }, signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  return (config.fetch || fetch)(config.baseUrl + path, init);
}

async function parse(response) {
  const text = await response.text();
  let body = null;
  if (text) { try { body = JSON.parse(text); } catch { body = null; } }
  if (!response.ok) throw new ApiError(response.status, body && body.error);
  if (body && typeof body === "object" && "success" in body && "data" in body) return body.data;
  return body;
}

async function sessionReason(response) {
  if (response.status !== 401) return null;
  try {
    const body = await response.clone().json();
    return (body && body.error && body.error.details && body.error.details.reason) || null;
  } catch { return null; }
}

/** Refresh the session once for every caller that saw a 401 since `since` (ms). */
export function refresh(since = Date.now()) {
  if (!refreshing) {
    refreshing = withLock(async () => {
      // Another tab (or this one) refreshed after our request was sent: just retry.
      if (Math.max(lastRefreshAt, readStoredRefresh()) >= since) return true;
      const response = await send("/api/v1/auth/refresh", { method: "POST" });
      if (!response.ok) return false;
      const data = await parse(response).catch(() => null);
      if (!data || !data.user) return false;
      noteRefreshed(Date.now());
      return true;
    }).finally(() => { refreshing = null; });
  }
  return refreshing;
}

function withLock(task) {
  if (typeof navigator !== "undefined" && navigator.locks && navigator.locks.request) {
    return navigator.locks.request(REFRESH_LOCK, task);
  }
  return task();
}

/** fetch + envelope unwrapping + one refresh-and-retry on an expired session. */
export async function request(path, options = {}) {
  const sentAt = Date.now();
  let response = await send(path, options);
  const reason = await sessionReason(response);
  if (reason === "invalid_session" || reason === "missing_session") {
    const refreshed = await refresh(sentAt);
    if (!refreshed) {
      announceSignedOut("refresh_failed");
      throw new ApiError(401, { code: "UNAUTHORIZED", message: "Signed out", details: { reason } });
    }
    response = await send(path, options);
    if (response.status === 401) {
      announceSignedOut("unauthorized");
      return parse(response);
    }
  }
  return parse(response);
}

/**
 * The signed-in user (`{user: null}` when anonymous). `/me` answers anonymous once the browser
 * dropped the expired access cookie, so an anonymous answer tries the refresh cookie once.
 */
export async function me() {
  const sentAt = Date.now();
  let data = await request("/api/v1/users/me");
  if (data && !data.user && (await refresh(sentAt))) data = await request("/api/v1/users/me");
  if (data && data.user) signedOut = false;
  return data;
}

/** Sign in with email and password (the answer may ask for a second factor). */
export async function login(email, password) {
  const data = await request("/api/v1/auth/login", { method: "POST", body: { email, password } });
  signedOut = false;
  noteRefreshed(Date.now());
  if (channel) channel.postMessage({ type: "signed-in" });
  return data;
}

/** End this session (`{everywhere: true}`: every session of the user). */
export async function logout(options = {}) {
  const path = options.everywhere ? "/api/v1/auth/logout-all" : "/api/v1/auth/logout";
  try { await request(path, { method: "POST" }); } finally { announceSignedOut("logout"); }
}

/** Make another account the active one (a new access token with that account). */
export function switchAccount(accountId) {
  return request("/api/v1/accounts/switch", { method: "POST", body: { accountId } });
}

function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null) search.set(key, String(value));
  }
  const text = search.toString();
  return text ? "?" + text : "";
}

export const notifications = {
  /** A page of the inbox: `{items, nextCursor}`. */
  list(params = {}) { return request("/api/v1/notifications" + query(params)); },
  markRead(id) { return request(`/api/v1/notifications/${encodeURIComponent(id)}/read`, { method: "POST" }); },
  markAllRead() { return request("/api/v1/notifications/read-all", { method: "POST" }); },
  async unreadCount() { return (await request("/api/v1/notifications/unread-count")).count; },

  /**
   * Live notifications over SSE. `onItem(notification)` gets each new one once. The browser's
   * EventSource resumes with Last-Event-ID after a network drop; when the server refuses the
   * stream (expired session), the session is refreshed and the stream reopened with backoff,
   * and items missed meanwhile are fetched from the inbox. Returns `{close()}`.
   */
  subscribe(onItem, options = {}) {
    const onState = options.onState || (() => {});
    const seen = new Set();
    const minDelay = options.minDelay ?? 1000;
    const maxDelay = options.maxDelay ?? 30000;
    let source = null;
    let closed = false;
    let attempt = 0;
    let lastCreatedAt = null;
    let timer = null;

    const deliver = (item) => {
      if (!item || !item.id || seen.has(item.id)) return;
      seen.add(item.id);
      if (!lastCreatedAt || item.createdAt > lastCreatedAt) lastCreatedAt = item.createdAt;
      try { onItem(item); } catch (err) { console.error(err); }
    };

    const catchUp = async () => {
      if (!lastCreatedAt) return;
      const page = await notifications.list({ limit: 50 });
      for (const item of page.items.slice().reverse()) {
        if (item.createdAt > lastCreatedAt) deliver(item);
      }
    };

    const open = () => {
      if (closed) return;
      source = new EventSource(config.baseUrl + "/api/v1/notifications/stream", { withCredentials: true });
      source.onopen = () => {
        const resumed = attempt > 0;
        attempt = 0;
        onState("open");
        if (resumed) catchUp().catch(() => {});
      };
      source.onmessage = (event) => {
        let message;
        try { message = JSON.parse(event.data); } catch { return; }
        if (message && message.notification) deliver(message.notification);
      };
      source.onerror = () => {
        if (closed) return;
        if (source.readyState === EventSource.CONNECTING) { onState("retry"); return; }
        // Closed for good (an HTTP error such as 401): check the session, then reopen.
        source.close();
        onState("retry");
        attempt += 1;
        const delay = Math.min(maxDelay, minDelay * 2 ** (attempt - 1)) * (0.75 + Math.random() / 2);
        timer = setTimeout(async () => {
          try {
            const who = await me();
            if (!who || !who.user) { announceSignedOut("stream_refused"); onState("closed"); return; }
          } catch (err) {
            if (signedOut) { onState("closed"); return; }
          }
          open();
        }, delay);
      };
    };

    open();
    return {
      close() {
        closed = true;
        clearTimeout(timer);
        if (source) source.close();
        onState("closed");
      },
    };
  },
};

function urlBase64ToUint8Array(base64) {
  const padded = (base64 + "=".repeat((4 - (base64.length % 4)) % 4)).replace(/-/g, "+").replace(/_/g, "/");
  const raw = atob(padded);
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

export const push = {
  /** True when this browser can receive web push at all. */
  supported() {
    return typeof navigator !== "undefined" && "serviceWorker" in navigator && typeof PushManager !== "undefined";
  },

  /**
   * Register the service worker, ask for permission, subscribe with the server's VAPID key
   * and store the subscription. Resolves to the stored subscription.
   */
  async enable(options = {}) {
    if (!push.supported()) throw new Error("Web push is not supported by this browser");
    const { publicKey } = await request("/api/v1/notifications/push/vapid-public-key");
    const registration = await navigator.serviceWorker.register(options.serviceWorker || "/tenantd-sw.js");
    await navigator.serviceWorker.ready;
    if (Notification.permission !== "granted") {
      const permission = await Notification.requestPermission();
      if (permission !== "granted") throw new Error("Notification permission was " + permission);
    }
    let subscription = await registration.pushManager.getSubscription();
    if (!subscription) {
      subscription = await registration.pushManager.subscribe({
        userVisibleOnly: true,
        applicationServerKey: urlBase64ToUint8Array(publicKey),
      });
    }
    return request("/api/v1/notifications/push/subscribe", { method: "POST", body: subscription.toJSON() });
  },

  /** Unsubscribe this browser and forget it on the server. */
  async disable() {
    if (!push.supported()) return;
    const registration = await navigator.serviceWorker.getRegistration();
    const subscription = registration && (await registration.pushManager.getSubscription());
    if (!subscription) return;
    await request("/api/v1/notifications/push/subscribe", { method: "DELETE", body: { endpoint: subscription.endpoint } });
    await subscription.unsubscribe();
  },
};

export default { configure, onSignedOut, request, refresh, me, login, logout, switchAccount, notifications, push, ApiError };
