// Passkeys on the hosted pages (WebAuthn through tenantd's /api/v1/auth/passkeys routes):
// passwordless sign-in on /login (a button and the email field's autofill), the second step
// of a sign-in on /login/mfa and "Add a passkey" on /account. The buttons stay hidden where
// the browser has no WebAuthn; every other way in works without this file. The helpers are
// exported for pages that run their own ceremonies.
export const enc = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf)))
  .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
export const dec = (text) => {
  const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const raw = atob(b64 + "===".slice((b64.length + 3) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0)).buffer;
};
const descriptors = (list) => (list || []).map((c) => ({ ...c, id: dec(c.id) }));

export async function api(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body === undefined ? {} : body),
    credentials: "same-origin",
  });
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(payload?.error?.message || String(response.status));
  return payload.data;
}

export function assertion(c) {
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

export function registration(c) {
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

// The server's JSON options (base64url) as the browser's ArrayBuffers.
export const requestOptions = (options) => ({ ...options, challenge: dec(options.challenge),
                                              allowCredentials: descriptors(options.allowCredentials) });
export const creationOptions = (options) => ({ ...options, challenge: dec(options.challenge),
                                               user: { ...options.user, id: dec(options.user.id) },
                                               excludeCredentials: descriptors(options.excludeCredentials) });

// `extra` adds to the get() call: {mediation: "conditional", signal} for the autofill.
export async function getAssertion(options, extra = {}) {
  return assertion(await navigator.credentials.get({ publicKey: requestOptions(options), ...extra }));
}

export async function createCredential(options) {
  return registration(await navigator.credentials.create({ publicKey: creationOptions(options) }));
}

// The server says "off" where this page's address cannot use passkeys (an IP address as the
// relying party, an origin outside WEBAUTHN_ORIGINS): hidden rather than failing on /login.
const supported = typeof window.PublicKeyCredential === "function"
  && document.body?.dataset.passkeys !== "off";

// Passwordless sign-in: options without allowCredentials (the authenticator offers its
// discoverable passkeys for this site), then the session cookies; `extra` as getAssertion.
export async function passkeySignIn(extra = {}) {
  const options = await api("/api/v1/auth/passkeys/authenticate/options", {});
  const credential = await getAssertion(options, extra);
  return api("/api/v1/auth/passkeys/authenticate/verify", { credential });
}

function fail(button) {
  const note = document.querySelector(button.dataset.errorTarget || "[data-passkey-error]");
  if (note) { note.hidden = false; note.focus?.(); }
}

// /login/mfa: the passkey as the second factor of this sign-in.
for (const button of document.querySelectorAll("[data-passkey-verify]")) {
  if (!supported) continue;
  button.hidden = false;
  button.addEventListener("click", async () => {
    const ticket = button.dataset.ticket;
    button.disabled = true;
    try {
      const options = await api("/api/v1/auth/passkeys/authenticate/options", { ticket });
      const done = await api("/api/v1/auth/mfa/verify", { ticket, passkey: await getAssertion(options) });
      const next = button.dataset.next;
      location.assign(next || done.returnTo || "/notifications");
    } catch {
      fail(button);
      button.disabled = false;
    }
  });
}

// /account: add a passkey (the first factor's recovery codes are shown by reloading with them).
for (const button of document.querySelectorAll("[data-passkey-add]")) {
  if (!supported) continue;
  button.hidden = false;
  const nameInput = document.querySelector("[data-passkey-name]");
  if (nameInput) nameInput.hidden = false;
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const options = await api("/api/v1/auth/passkeys/register/options");
      const credential = await createCredential(options);
      const name = document.querySelector("[data-passkey-name]")?.value || undefined;
      const done = await api("/api/v1/auth/passkeys/register/verify",
                             { credential, ...(name ? { name } : {}) });
      if (done.recoveryCodes && done.recoveryCodes.length) {
        const list = document.querySelector("[data-new-codes]");
        if (list) {
          list.textContent = "";
          for (const code of done.recoveryCodes) {
            const item = document.createElement("li");
            item.textContent = code;
            list.append(item);
          }
          list.closest("[data-codes-box]").hidden = false;
          return;
        }
      }
      location.assign("/account?done=passkey_added#mfa");
    } catch {
      fail(button);
      button.disabled = false;
    }
  });
}

// "Confirm it's you" (step-up): the passkey's assertion goes into the form, which posts it.
for (const form of document.querySelectorAll("form[data-passkey-reauth]")) {
  if (!supported) continue;
  form.hidden = false;
  const button = form.querySelector("button");
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const options = await api("/api/v1/auth/reauth/passkey-options");
      form.elements.passkey.value = JSON.stringify(await getAssertion(options));
      form.submit();
    } catch {
      fail(button);
      button.disabled = false;
    }
  });
}

// /login: "Sign in with a passkey", and the same passkeys offered in the email field's
// autofill (conditional mediation) while the page is open. Only one WebAuthn request may be
// pending, so the button aborts the autofill's before starting its own.
const signInButton = document.querySelector("[data-passkey-sign-in]");
let autofill = null;

function signedInWithPasskey(button) {
  location.assign(button?.dataset.next || "/notifications");
}

async function startAutofill(button) {
  if (!supported || !document.querySelector('input[autocomplete~="webauthn"]')) return;
  if (!(await PublicKeyCredential.isConditionalMediationAvailable?.())) return;
  const controller = new AbortController();
  autofill = controller;
  try {
    await passkeySignIn({ mediation: "conditional", signal: controller.signal });
    signedInWithPasskey(button);
  } catch (error) {
    // Aborted for the button, or the user picked nothing usable: the form stays as it was.
    if (!controller.signal.aborted && error?.name !== "AbortError" && button) fail(button);
  } finally {
    if (autofill === controller) autofill = null;
  }
}

if (signInButton && supported) {
  signInButton.hidden = false;
  signInButton.closest("[data-passkey-block]")?.removeAttribute("hidden");
  signInButton.addEventListener("click", async () => {
    autofill?.abort();
    signInButton.disabled = true;
    try {
      await passkeySignIn();
      signedInWithPasskey(signInButton);
    } catch {
      fail(signInButton);
      signInButton.disabled = false;
      startAutofill(signInButton);
    }
  });
}
if (signInButton) startAutofill(signInButton);
