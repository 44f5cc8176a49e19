// Passkeys on the hosted pages (WebAuthn through tenantd's /api/v1/auth/passkeys routes):
// the second step of a sign-in on /login/mfa and "Add a passkey" on /account. The buttons
// stay hidden where the browser has no WebAuthn; every other factor works without this file.
const enc = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf)))
  .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const dec = (text) => {
  const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const raw = atob(b64 + "===".slice((b64.length + 3) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0)).buffer;
};
const descriptors = (list) => (list || []).map((c) => ({ ...c, id: dec(c.id) }));

async function api(path, body) {
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

async function getAssertion(options) {
  const publicKey = { ...options, challenge: dec(options.challenge),
                      allowCredentials: descriptors(options.allowCredentials) };
  return assertion(await navigator.credentials.get({ publicKey }));
}

const supported = typeof window.PublicKeyCredential === "function";

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
      const publicKey = { ...options, challenge: dec(options.challenge),
                          user: { ...options.user, id: dec(options.user.id) },
                          excludeCredentials: descriptors(options.excludeCredentials) };
      const credential = await navigator.credentials.create({ publicKey });
      const name = document.querySelector("[data-passkey-name]")?.value || undefined;
      const done = await api("/api/v1/auth/passkeys/register/verify",
                             { credential: registration(credential), ...(name ? { name } : {}) });
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
