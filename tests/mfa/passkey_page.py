"""A minimal page served at tenantd's own origin for the browser tests of the JSON routes:
WebAuthn ceremonies through tenantd's passkey routes, with the helpers of the shipped
/static/passkeys.js (served by tenantd with the hosted pages)."""

from __future__ import annotations

from aiohttp import web

from tenantd.web.spec import Access, Routes

ROUTES = Routes("passkey-test-page")

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>passkeys</title></head><body>
<h1>Passkeys</h1>
<script type="module">
// The shipped helpers (base64url, credential JSON, the ceremonies), not a copy of them.
import * as passkeys from "/static/passkeys.js";
const { createCredential, enc, getAssertion, requestOptions } = passkeys;
// Unlike passkeys.js's api(), the tests want every answer (status and body), errors too.
async function api(path, body, method = "POST") {
  const response = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  return { status: response.status, body: await response.json() };
}
const options = async (path, body) => (await api(path, body)).body.data;
Object.assign(window, {
  api,
  enc,
  getAssertion,
  requestOptions,
  registerPasskey: async (name) => api("/api/v1/auth/passkeys/register/verify", {
    credential: await createCredential(await options("/api/v1/auth/passkeys/register/options")),
    name,
  }),
  passkeySignIn: async () => api("/api/v1/auth/passkeys/authenticate/verify", {
    credential: await getAssertion(await options("/api/v1/auth/passkeys/authenticate/options", {})),
  }),
  passkeySecondFactor: async (ticket) => api("/api/v1/auth/mfa/verify", {
    ticket,
    passkey: await getAssertion(
      await options("/api/v1/auth/passkeys/authenticate/options", { ticket })),
  }),
  passkeyReauth: async () => api("/api/v1/auth/reauth", {
    passkey: await getAssertion(await options("/api/v1/auth/reauth/passkey-options")),
  }),
});
document.body.dataset.ready = "true";
</script></body></html>
"""


@ROUTES.get(
    "/test/passkeys", access=Access.PUBLIC, wrapped=False, summary="passkey test page (tests)"
)
async def page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html")
