// What the tests (test/*.test.js) share: the live tenantd the pytest runner started (tests/clients), and a
// fetch with a cookie jar (Node's fetch keeps no cookies; a browser's does).
import assert from "node:assert/strict";

export const BASE = process.env.TENANTD_URL;
export const API_KEY = process.env.TENANTD_API_KEY;
export const EMAIL = process.env.TENANTD_EMAIL;
export const PASSWORD = process.env.TENANTD_PASSWORD;
assert.ok(BASE && API_KEY && EMAIL && PASSWORD, "run through tests/clients/test_js_client.py (TENANTD_URL, ...)");

/** A browser's cookie jar over fetch; `calls` counts requests per path. */
export function cookieFetch() {
  const jar = new Map();
  const calls = new Map();
  async function jarFetch(url, init = {}) {
    const path = new URL(url).pathname;
    calls.set(path, (calls.get(path) || 0) + 1);
    const headers = new Headers(init.headers || {});
    headers.set("Origin", BASE);
    if (jar.size) headers.set("Cookie", [...jar].map(([k, v]) => `${k}=${v}`).join("; "));
    const response = await fetch(url, { ...init, headers });
    for (const line of response.headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(";");
      const index = pair.indexOf("=");
      const name = pair.slice(0, index).trim();
      const expired = attributes.some((a) => /^\s*max-age=0\s*$/i.test(a));
      if (expired) jar.delete(name);
      else jar.set(name, pair.slice(index + 1).trim());
    }
    return response;
  }
  return { fetch: jarFetch, jar, calls };
}

/** The access token of a fresh sign-in of the test user. */
export async function signIn() {
  const browser = cookieFetch();
  const response = await browser.fetch(`${BASE}/api/v1/auth/login`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ email: EMAIL, password: PASSWORD }),
  });
  assert.equal(response.status, 200, await response.text());
  const token = browser.jar.get("auth_token");
  assert.ok(token, "no auth_token cookie");
  const me = await (await browser.fetch(`${BASE}/api/v1/users/me`)).json();
  return { token, userId: me.user.id, browser };
}
