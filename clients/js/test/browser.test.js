// The browser half (src/browser.js, served as /static/tenantd.js) in Node, against the live
// server: sign-in, the session refreshed once for many concurrent callers, sign-out. The
// cross-origin browser run is tests/ui/test_cross_origin.py (Chromium).
import assert from "node:assert/strict";
import { test } from "node:test";

import tenantd, { ApiError, configure, login, logout, me, onSignedOut, request } from "../src/browser.js";
import { BASE, EMAIL, PASSWORD, cookieFetch } from "../testing/live.js";

test("sign in, refresh once for concurrent callers, sign out", async () => {
  const browser = cookieFetch();
  configure({ baseUrl: `${BASE}/`, fetch: browser.fetch });
  assert.equal(tenantd.configure, configure);

  assert.deepEqual((await me()).user, null);
  const signedIn = await login(EMAIL, PASSWORD);
  assert.equal(signedIn.user.email, EMAIL);
  const first = await me();
  assert.equal(first.user.email, EMAIL);

  // The access cookie expires (the browser drops it): five calls at once see an anonymous /me
  // or a 401 missing_session; one refresh serves them all (a second would reuse the rotated
  // refresh token and end the session).
  const refreshToken = browser.jar.get("refresh_token");
  const refreshes = browser.calls.get("/api/v1/auth/refresh") || 0;
  browser.jar.delete("auth_token");
  const answers = await Promise.all([me(), me(), me(), request("/api/v1/notifications/unread-count"), me()]);
  assert.equal(browser.calls.get("/api/v1/auth/refresh"), refreshes + 1);
  for (const answer of [answers[0], answers[1], answers[2], answers[4]]) assert.equal(answer.user.email, EMAIL);
  assert.equal(typeof answers[3].count, "number");
  assert.notEqual(browser.jar.get("refresh_token"), refreshToken, "the refresh token rotates");

  const reasons = [];
  const stop = onSignedOut((reason) => reasons.push(reason));
  await logout();
  stop();
  assert.deepEqual(reasons, ["logout"]);
  assert.deepEqual((await me()).user, null);

  // Signed out for good: a refresh is refused, the caller gets a 401 ApiError.
  await assert.rejects(request("/api/v1/notifications"), (error) => {
    assert.ok(error instanceof ApiError);
    assert.equal(error.status, 401);
    return true;
  });
});
