"""A minimal page served at tenantd's own origin for the browser tests (the hosted pages
are another change): WebAuthn ceremonies through tenantd's passkey routes."""

from __future__ import annotations

from aiohttp import web

from tenantd.web.spec import Access, Routes

ROUTES = Routes("passkey-test-page")

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>passkeys</title></head><body>
<h1>Passkeys</h1>
<script>
const enc = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf)))
  .replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
const dec = (text) => {
  const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const raw = atob(b64 + "===".slice((b64.length + 3) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0)).buffer;
};
const descriptors = (list) => (list || []).map((c) => ({ ...c, id: dec(c.id) }));
async function api(path, body, method = "POST") {
  const response = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  return { status: response.status, body: await response.json() };
}
function registration(c) {
  return {
    id: c.id, rawId: enc(c.rawId), type: c.type,
    response: {
      clientDataJSON: enc(c.response.clientDataJSON),
      attestationObject: enc(c.response.attestationObject),
      transports: c.response.getTransports ? c.response.getTransports() : [],
    },
    clientExtensionResults: c.getClientExtensionResults(),
    authenticatorAttachment: c.authenticatorAttachment,
  };
}
function assertion(c) {
  return {
    id: c.id, rawId: enc(c.rawId), type: c.type,
    response: {
      clientDataJSON: enc(c.response.clientDataJSON),
      authenticatorData: enc(c.response.authenticatorData),
      signature: enc(c.response.signature),
      userHandle: c.response.userHandle ? enc(c.response.userHandle) : null,
    },
    clientExtensionResults: c.getClientExtensionResults(),
    authenticatorAttachment: c.authenticatorAttachment,
  };
}
async function getAssertion(options) {
  const publicKey = { ...options, challenge: dec(options.challenge),
                      allowCredentials: descriptors(options.allowCredentials) };
  return assertion(await navigator.credentials.get({ publicKey }));
}
window.api = api;
window.registerPasskey = async (name) => {
  const options = (await api("/api/v1/auth/passkeys/register/options")).body.data;
  const publicKey = { ...options, challenge: dec(options.challenge),
                      user: { ...options.user, id: dec(options.user.id) },
                      excludeCredentials: descriptors(options.excludeCredentials) };
  const credential = await navigator.credentials.create({ publicKey });
  return api("/api/v1/auth/passkeys/register/verify",
             { credential: registration(credential), name });
};
window.passkeySignIn = async () => {
  const options = (await api("/api/v1/auth/passkeys/authenticate/options", {})).body.data;
  return api("/api/v1/auth/passkeys/authenticate/verify",
             { credential: await getAssertion(options) });
};
window.passkeySecondFactor = async (ticket) => {
  const options = (await api("/api/v1/auth/passkeys/authenticate/options", { ticket })).body.data;
  return api("/api/v1/auth/mfa/verify", { ticket, passkey: await getAssertion(options) });
};
window.passkeyReauth = async () => {
  const options = (await api("/api/v1/auth/reauth/passkey-options")).body.data;
  return api("/api/v1/auth/reauth", { passkey: await getAssertion(options) });
};
</script></body></html>
"""


@ROUTES.get(
    "/test/passkeys", access=Access.PUBLIC, wrapped=False, summary="passkey test page (tests)"
)
async def page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html")
