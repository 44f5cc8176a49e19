// The server half of tenantd's client (Node 18+, Deno, Bun, workers): verify access tokens
// against tenantd's JWKS, send notifications, read the events API, verify webhooks. Only the
// platform's fetch and WebCrypto (`crypto.subtle`): no dependency.
//
//   import { Tenantd, verifyWebhook } from "tenantd-client/server";
//   const tenantd = new Tenantd({ baseUrl: "https://auth.example.com", apiKey: process.env.TENANTD_API_KEY });
//   const claims = await tenantd.verifyAccessToken(token);

const subtle = globalThis.crypto.subtle;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Access tokens are signed with these (ACCESS_TOKEN_ALG); HS256 has no public key to check. */
export const ALGORITHMS = Object.freeze(["EdDSA", "ES256"]);
const IMPORT = {
  EdDSA: { name: "Ed25519" },
  ES256: { name: "ECDSA", namedCurve: "P-256" },
};
const VERIFY = {
  EdDSA: { name: "Ed25519" },
  ES256: { name: "ECDSA", hash: "SHA-256" },
};

/** A token that is not a valid tenantd access token (bad signature, expired, wrong issuer...). */
export class TokenError extends Error {
  constructor(message) {
    super(message);
    this.name = "TokenError";
  }
}

/** A webhook whose signature or timestamp does not check out. */
export class WebhookVerificationError extends Error {
  constructor(message) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

/** An error answer of tenantd's API: `status`, `code` (e.g. `INSUFFICIENT_SCOPE`), `details`. */
export class TenantdError extends Error {
  constructor(status, error, retryAfter) {
    super((error && error.message) || `HTTP ${status}`);
    this.name = "TenantdError";
    this.status = status;
    this.code = (error && error.code) || `HTTP_${status}`;
    this.details = (error && error.details) || undefined;
    this.retryAfter = retryAfter;
  }
}

function base64UrlDecode(text) {
  if (typeof text !== "string" || !/^[A-Za-z0-9_-]*$/.test(text)) throw new TokenError("malformed token");
  return base64Decode(text.replace(/-/g, "+").replace(/_/g, "/"));
}

function base64Decode(text) {
  const padded = text + "=".repeat((4 - (text.length % 4)) % 4);
  const raw = atob(padded);
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function parseJson(bytes, what) {
  try {
    const value = JSON.parse(decoder.decode(bytes));
    if (value && typeof value === "object" && !Array.isArray(value)) return value;
  } catch {
    /* fall through */
  }
  throw new TokenError(`malformed token ${what}`);
}

/**
 * tenantd's signing keys, fetched from `jwksUrl` and kept `maxAgeMs` (default 5 min, the
 * JWKS's own Cache-Control). An unknown `kid` (a key rotated in since) refetches at once, but
 * at most once per `cooldownMs`, so forged kids cannot make it hammer tenantd. Concurrent
 * callers share one fetch.
 */
export class JwksCache {
  constructor(jwksUrl, { fetch: fetchImpl, maxAgeMs = 300_000, cooldownMs = 30_000, now = Date.now } = {}) {
    this.url = String(jwksUrl);
    this.fetch = fetchImpl || globalThis.fetch.bind(globalThis);
    this.maxAgeMs = maxAgeMs;
    this.cooldownMs = cooldownMs;
    this.now = now;
    this.keys = new Map(); // kid -> { alg, key: Promise<CryptoKey> }
    this.fetchedAt = -Infinity;
    this.inFlight = null;
    this.fetches = 0;
  }

  /** The public key named `kid` for `alg`, or null when tenantd does not publish it. */
  async key(kid, alg) {
    const now = this.now();
    if (now - this.fetchedAt >= this.maxAgeMs) await this.refresh();
    else if (!this.keys.has(kid) && now - this.fetchedAt >= this.cooldownMs) await this.refresh();
    const entry = this.keys.get(kid);
    if (!entry || entry.alg !== alg) return null;
    return entry.key;
  }

  refresh() {
    if (!this.inFlight) {
      this.inFlight = this.load().finally(() => {
        this.inFlight = null;
      });
    }
    return this.inFlight;
  }

  async load() {
    this.fetches += 1;
    const response = await this.fetch(this.url, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new TokenError(`JWKS answered ${response.status}`);
    const document = await response.json();
    const keys = new Map();
    for (const jwk of (document && document.keys) || []) {
      if (!jwk || typeof jwk.kid !== "string" || !IMPORT[jwk.alg]) continue;
      const { alg, kid } = jwk;
      const material = { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y };
      if (material.y === undefined) delete material.y;
      const key = subtle.importKey("jwk", material, IMPORT[alg], false, ["verify"]);
      key.catch(() => {}); // a bad key fails its own verifications, not the load
      keys.set(kid, { alg, key });
    }
    this.keys = keys;
    this.fetchedAt = this.now();
  }
}

/**
 * Verify a tenantd access token (the `auth_token` cookie, or a bearer token): signature by a
 * key of the JWKS, `alg` one of `algorithms`, issuer, audience when given, `exp`/`nbf` with
 * `leewaySeconds`, and `sub`, `sid`, `iat`, `exp` present. Resolves to the claims
 * (`{sub, aid, sid, jti, iat, exp, iss, ...}`); rejects with TokenError.
 */
export async function verifyAccessToken(token, jwks, options = {}) {
  const { issuer = "tenantd", audience, algorithms = ALGORITHMS, leewaySeconds = 5, now = Date.now } = options;
  if (typeof token !== "string") throw new TokenError("no token");
  const parts = token.split(".");
  if (parts.length !== 3) throw new TokenError("malformed token");
  const header = parseJson(base64UrlDecode(parts[0]), "header");
  const claims = parseJson(base64UrlDecode(parts[1]), "claims");
  const signature = base64UrlDecode(parts[2]);
  const { alg, kid } = header;
  if (!algorithms.includes(alg) || !VERIFY[alg]) throw new TokenError(`algorithm ${alg} is not accepted`);
  if (typeof kid !== "string") throw new TokenError("no kid");
  const key = await jwks.key(kid, alg);
  if (!key) throw new TokenError("signed by an unknown key");
  const signed = encoder.encode(`${parts[0]}.${parts[1]}`);
  let valid = false;
  try {
    valid = await subtle.verify(VERIFY[alg], await key, signature, signed);
  } catch {
    valid = false;
  }
  if (!valid) throw new TokenError("bad signature");
  for (const name of ["sub", "sid", "iat", "exp"]) {
    if (claims[name] === undefined || claims[name] === null) throw new TokenError(`no ${name} claim`);
  }
  const seconds = now() / 1000;
  if (typeof claims.exp !== "number" || claims.exp + leewaySeconds <= seconds) throw new TokenError("expired");
  if (typeof claims.nbf === "number" && claims.nbf - leewaySeconds > seconds) throw new TokenError("not yet valid");
  if (claims.iss !== issuer) throw new TokenError("wrong issuer");
  if (audience !== undefined) {
    const audiences = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
    if (!audiences.includes(audience)) throw new TokenError("wrong audience");
  }
  return claims;
}

/** The secret's key bytes: `whsec_<base64>` (the `whsec_` prefix is optional). */
function webhookKey(secret) {
  const text = String(secret).startsWith("whsec_") ? String(secret).slice(6) : String(secret);
  try {
    return base64Decode(text);
  } catch {
    throw new WebhookVerificationError("the secret is not whsec_<base64>");
  }
}

function header(headers, name) {
  if (headers && typeof headers.get === "function") return headers.get(name);
  for (const [key, value] of Object.entries(headers || {})) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? value[0] : value;
  }
  return null;
}

/**
 * Verify a webhook delivery (Standard Webhooks): `webhook-signature` holds one or more
 * space-separated `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` keyed with the secret's
 * bytes (two during a secret rotation); `webhook-timestamp` within `toleranceSeconds` (300) of
 * now. The comparison is WebCrypto's HMAC verify (constant time). `body`: the raw body (string
 * or bytes), exactly as received. Resolves to the parsed event; rejects with
 * WebhookVerificationError.
 */
export async function verifyWebhook(secret, headers, body, { toleranceSeconds = 300, now = Date.now } = {}) {
  const id = header(headers, "webhook-id");
  const timestamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestamp || !signatures) throw new WebhookVerificationError("missing webhook headers");
  if (!/^\d{1,15}$/.test(timestamp)) throw new WebhookVerificationError("bad timestamp");
  if (Math.abs(now() / 1000 - Number(timestamp)) > toleranceSeconds) {
    throw new WebhookVerificationError("timestamp outside the tolerance");
  }
  const bytes = typeof body === "string" ? encoder.encode(body) : new Uint8Array(body);
  const prefix = encoder.encode(`${id}.${timestamp}.`);
  const signed = new Uint8Array(prefix.length + bytes.length);
  signed.set(prefix);
  signed.set(bytes, prefix.length);
  const key = await subtle.importKey("raw", webhookKey(secret), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
  for (const item of String(signatures).split(" ")) {
    const [version, value] = item.split(",", 2);
    if (version !== "v1" || !value || !/^[A-Za-z0-9+/]+=*$/.test(value)) continue;
    if (await subtle.verify("HMAC", key, base64Decode(value), signed)) {
      return JSON.parse(decoder.decode(bytes));
    }
  }
  throw new WebhookVerificationError("no matching signature");
}

/**
 * tenantd for a backend: `verifyAccessToken` (JWKS cached), `send`, `sendBatch`, `events`
 * and `eventPages` (the events API's cursor). `apiKey`: `tdk_...` with the scopes the calls
 * need (`notifications:send`, `events:read`).
 */
export class Tenantd {
  constructor({ baseUrl, apiKey, fetch: fetchImpl, issuer = "tenantd", audience, jwks } = {}) {
    if (!baseUrl) throw new TypeError("baseUrl is required (tenantd's PUBLIC_BASE_URL)");
    this.baseUrl = String(baseUrl).replace(/\/$/, "");
    this.apiKey = apiKey;
    this.fetch = fetchImpl || globalThis.fetch.bind(globalThis);
    this.issuer = issuer;
    this.audience = audience;
    this.jwks = jwks || new JwksCache(`${this.baseUrl}/.well-known/jwks.json`, { fetch: this.fetch });
  }

  /** The claims of a valid access token; rejects with TokenError. */
  verifyAccessToken(token, options = {}) {
    return verifyAccessToken(token, this.jwks, { issuer: this.issuer, audience: this.audience, ...options });
  }

  async call(method, path, { body, headers = {} } = {}) {
    if (!this.apiKey) throw new TypeError("apiKey is required for server routes");
    const init = { method, headers: { Accept: "application/json", Authorization: `Bearer ${this.apiKey}`, ...headers } };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["Content-Type"] = "application/json";
    }
    const response = await this.fetch(this.baseUrl + path, init);
    const text = await response.text();
    let parsed = null;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = null;
      }
    }
    if (!response.ok) {
      const retryAfter = Number(response.headers.get("Retry-After")) || undefined;
      throw new TenantdError(response.status, parsed && parsed.error, retryAfter);
    }
    if (parsed && typeof parsed === "object" && "success" in parsed && "data" in parsed) return parsed.data;
    return parsed;
  }

  /**
   * Send a notification: `{type, recipientUserId, payload, idempotencyKey?, deliverAt?,
   * delaySeconds?}` -> `{id, status}` ("queued", "scheduled", ...). A repeated
   * `idempotencyKey` answers the first send's id.
   */
  send(notification) {
    const headers = notification.idempotencyKey ? { "Idempotency-Key": notification.idempotencyKey } : {};
    return this.call("POST", "/api/v1/notifications/send", { body: notification, headers });
  }

  /** Several sends in one request: `{items: [...]}` answered item by item. */
  sendBatch(items) {
    return this.call("POST", "/api/v1/notifications/send-batch", { body: { items } });
  }

  /** One page of events after `after`: `{items, nextCursor, hasMore}`. */
  events({ after, types, limit } = {}) {
    const query = new URLSearchParams();
    if (after) query.set("after", after);
    if (types && types.length) query.set("types", Array.isArray(types) ? types.join(",") : types);
    if (limit) query.set("limit", String(limit));
    const text = query.toString();
    return this.call("GET", `/api/v1/events${text ? `?${text}` : ""}`);
  }

  /**
   * The pages of events after `after` until the newest: `for await (const page of
   * tenantd.eventPages(cursor)) { handle(page.items); save(page.nextCursor); }` (store the
   * cursor after handling a page, so a crash repeats a page rather than skipping one).
   */
  async *eventPages(after, { types, limit } = {}) {
    let cursor = after;
    for (;;) {
      const page = await this.events({ after: cursor, types, limit });
      yield page;
      cursor = page.nextCursor;
      if (!page.hasMore) return;
    }
  }
}

export default { Tenantd, JwksCache, verifyAccessToken, verifyWebhook, TokenError, WebhookVerificationError, TenantdError, ALGORITHMS };
