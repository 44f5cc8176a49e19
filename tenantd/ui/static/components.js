// tenantd's Web Components (an ES module; no framework, no build step, no dependencies).
//
//   <script type="module" src="https://auth.example.com/static/components.js"></script>
//   <tenantd-inbox></tenantd-inbox>
//   <tenantd-user-button></tenantd-user-button>
//   <tenantd-account-switcher></tenantd-account-switcher>
//
// Each element takes a `base-url` attribute: the tenantd to talk to (default: the origin this
// script was loaded from). A page on another origin needs that origin in tenantd's
// ALLOWED_ORIGINS. Session, refresh and the live stream are the browser client's
// (./tenantd.js, imported here, so a page that also imports it shares one session state).
//
// Theming: CSS custom properties set on the element or any ancestor (--tenantd-accent,
// --tenantd-accent-fg, --tenantd-font, --tenantd-radius, --tenantd-bg, --tenantd-fg,
// --tenantd-muted, --tenantd-border, --tenantd-badge, --tenantd-shadow, --tenantd-panel-width)
// and ::part(...) (bell, badge, panel, item, button, avatar, menu, option, link).
//
// Events (bubbling, composed): `tenantd-signed-out`, `tenantd-account-switched`
// (detail: {account, role}), `tenantd-notification` (detail: the notification).

import * as client from "./tenantd.js";

const SCRIPT_ORIGIN = new URL(import.meta.url).origin;

const STYLE = `
:host {
  --_accent: var(--tenantd-accent, #4f46e5);
  --_accent-fg: var(--tenantd-accent-fg, #fff);
  --_font: var(--tenantd-font, system-ui, -apple-system, "Segoe UI", Roboto, sans-serif);
  --_radius: var(--tenantd-radius, 10px);
  --_bg: var(--tenantd-bg, #fff);
  --_fg: var(--tenantd-fg, #111827);
  --_muted: var(--tenantd-muted, #6b7280);
  --_border: var(--tenantd-border, #e5e7eb);
  --_badge: var(--tenantd-badge, #dc2626);
  --_shadow: var(--tenantd-shadow, 0 10px 30px rgba(16, 24, 40, .16), 0 2px 6px rgba(16, 24, 40, .08));
  position: relative;
  display: inline-block;
  font: 14px/1.45 var(--_font);
  color: var(--_fg);
}
:host([hidden]), :host([data-state="loading"]) { display: none; }
* { box-sizing: border-box; }
button { font: inherit; color: inherit; }
.trigger {
  display: inline-flex; align-items: center; gap: .5rem; min-height: 36px;
  padding: .3rem .6rem; border: 1px solid var(--_border); border-radius: var(--_radius);
  background: var(--_bg); cursor: pointer;
}
.trigger:hover { border-color: var(--_muted); }
:focus-visible { outline: 2px solid var(--_accent); outline-offset: 2px; }
.bell { position: relative; padding: .35rem; min-width: 36px; justify-content: center; }
.bell svg { width: 20px; height: 20px; display: block; }
.badge {
  position: absolute; top: -6px; right: -6px; min-width: 18px; height: 18px; padding: 0 5px;
  border-radius: 9px; background: var(--_badge); color: #fff; font-size: 11px; font-weight: 600;
  line-height: 18px; text-align: center;
}
.badge[hidden] { display: none; }
.panel {
  position: absolute; top: calc(100% + 6px); right: 0; z-index: 1000;
  width: var(--tenantd-panel-width, 360px); max-width: calc(100vw - 16px);
  background: var(--_bg); color: var(--_fg); border: 1px solid var(--_border);
  border-radius: var(--_radius); box-shadow: var(--_shadow); overflow: hidden;
}
:host([align="start"]) .panel { left: 0; right: auto; }
.panel[hidden] { display: none; }
.head { display: flex; align-items: center; justify-content: space-between; gap: .5rem;
  padding: .65rem .85rem; border-bottom: 1px solid var(--_border); }
.head h2 { font-size: 14px; margin: 0; }
.plain { border: 0; background: none; padding: .2rem .35rem; border-radius: 6px; cursor: pointer;
  color: var(--_accent); font-size: 13px; }
.plain:hover { text-decoration: underline; }
.plain[disabled] { color: var(--_muted); cursor: default; text-decoration: none; }
ul { list-style: none; margin: 0; padding: 0; }
.items { max-height: 380px; overflow-y: auto; }
.item { display: flex; gap: .6rem; padding: .65rem .85rem; border-bottom: 1px solid var(--_border); }
.item:last-child { border-bottom: 0; }
.dot { flex: none; width: 8px; height: 8px; margin-top: .45rem; border-radius: 50%; background: transparent; }
.item[data-status="unread"] .dot { background: var(--_accent); }
.item[data-status="unread"] .title { font-weight: 600; }
.grow { flex: 1; min-width: 0; }
.title { margin: 0; overflow-wrap: anywhere; }
.body { margin: .1rem 0 0; color: var(--_muted); overflow-wrap: anywhere; }
.meta { display: flex; gap: .6rem; align-items: center; margin-top: .25rem; font-size: 12px; color: var(--_muted); }
.meta a, .foot a, .menu a, .link { color: var(--_accent); text-decoration: none; }
.meta a:hover, .foot a:hover, .link:hover { text-decoration: underline; }
.empty { padding: 1.5rem .85rem; text-align: center; color: var(--_muted); margin: 0; }
.foot { padding: .55rem .85rem; border-top: 1px solid var(--_border); font-size: 13px; }
.avatar {
  display: inline-grid; place-items: center; width: 28px; height: 28px; border-radius: 50%;
  background: var(--_accent); color: var(--_accent-fg); font-size: 12px; font-weight: 600;
  overflow: hidden; flex: none;
}
.avatar img { width: 100%; height: 100%; object-fit: cover; }
.who { padding: .7rem .85rem; border-bottom: 1px solid var(--_border); display: flex; gap: .6rem; align-items: center; }
.who .avatar { width: 36px; height: 36px; font-size: 14px; }
.who p { margin: 0; overflow-wrap: anywhere; }
.who .email { color: var(--_muted); font-size: 13px; }
.menu { padding: .3rem 0; }
.menu [role="menuitem"], .option {
  display: flex; align-items: center; justify-content: space-between; gap: .5rem; width: 100%;
  padding: .5rem .85rem; border: 0; background: none; text-align: left; cursor: pointer;
  color: var(--_fg); font: inherit;
}
.menu [role="menuitem"]:hover, .menu [role="menuitem"]:focus, .option:hover, .option:focus {
  background: color-mix(in srgb, var(--_accent) 10%, var(--_bg)); outline: none;
}
.option[aria-selected="true"] { font-weight: 600; }
.option .role { color: var(--_muted); font-size: 12px; font-weight: 400; }
.check { color: var(--_accent); visibility: hidden; }
.option[aria-selected="true"] .check { visibility: visible; }
.name { max-width: 14rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.chev { width: 12px; height: 12px; color: var(--_muted); }
.sr { position: absolute; width: 1px; height: 1px; margin: -1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
.error { color: var(--_badge); padding: .4rem .85rem; margin: 0; font-size: 13px; }
`;

const BELL = '<svg viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="1.8" stroke-linecap="round" stroke-linejoin="round" aria-hidden="true"><path d="M6 8a6 6 0 1 1 12 0c0 7 3 9 3 9H3s3-2 3-9"/><path d="M10.3 21a1.94 1.94 0 0 0 3.4 0"/></svg>';
const CHEVRON = '<svg class="chev" viewBox="0 0 12 12" aria-hidden="true"><path d="M3 4.5 6 7.5 9 4.5" fill="none" stroke="currentColor" stroke-width="1.5"/></svg>';

/** One `/me` shared by every element on the page (reloaded on demand). */
const session = { loading: null, data: null, events: new EventTarget() };

function loadMe(force = false) {
  if (!session.loading || force) {
    session.loading = client.me().then((data) => {
      session.data = data;
      session.events.dispatchEvent(new Event("change"));
      return data;
    });
    session.loading.catch(() => { session.loading = null; });
  }
  return session.loading;
}

client.onSignedOut(() => {
  session.data = { user: null };
  session.loading = Promise.resolve(session.data);
  session.events.dispatchEvent(new Event("change"));
});

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

/** A link target from tenantd's data: relative to tenantd, and only http(s). */
function safeUrl(url, base) {
  try {
    const resolved = new URL(url, base + "/");
    return resolved.protocol === "http:" || resolved.protocol === "https:" ? resolved.href : null;
  } catch { return null; }
}

function initials(user) {
  const names = [user.firstName, user.lastName].filter(Boolean);
  const letters = names.length ? names.map((n) => n.trim()[0]) : [(user.email || "?")[0]];
  return letters.join("").slice(0, 2).toUpperCase();
}

function displayName(user) {
  return [user.firstName, user.lastName].filter(Boolean).join(" ") || user.email;
}

function ago(iso) {
  const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
  const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  for (const [unit, size] of [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400], ["hour", 3600], ["minute", 60]]) {
    if (Math.abs(seconds) >= size) return format.format(Math.round(seconds / size), unit);
  }
  return format.format(0, "second");
}

/** What the three elements share: base-url, shadow root, a popover that Escape closes. */
class TenantdElement extends HTMLElement {
  constructor() {
    super();
    this.attachShadow({ mode: "open" });
    this._onDocPointer = (event) => {
      if (this._open && !event.composedPath().includes(this)) this.close(false);
    };
    this._onSession = () => this.render();
    this.shadowRoot.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this._open) {
        event.stopPropagation();
        this.close();
      }
    });
    // Tab (or a click) taking the focus out of the element closes its popover.
    this.shadowRoot.addEventListener("focusout", (event) => {
      const next = event.relatedTarget;
      if (this._open && next && !this.shadowRoot.contains(next)) this.close(false);
    });
  }

  get baseUrl() {
    return (this.getAttribute("base-url") || SCRIPT_ORIGIN).replace(/\/+$/, "");
  }

  connectedCallback() {
    client.configure({ baseUrl: this.baseUrl });
    this.setAttribute("data-state", "loading");
    document.addEventListener("pointerdown", this._onDocPointer);
    session.events.addEventListener("change", this._onSession);
    loadMe().then(() => this.render(), (err) => this.fail(err));
  }

  disconnectedCallback() {
    document.removeEventListener("pointerdown", this._onDocPointer);
    session.events.removeEventListener("change", this._onSession);
  }

  get user() { return session.data && session.data.user; }

  fail(err) {
    console.error("tenantd:", err);
    this.setAttribute("data-state", "error");
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true }));
  }

  /** Build the shadow tree: the style, then `nodes`. */
  paint(...nodes) {
    this.shadowRoot.replaceChildren(el("style", { text: STYLE }), ...nodes);
  }

  popover(trigger, panel) {
    this._trigger = trigger;
    this._panel = panel;
    this._open = false;
    trigger.addEventListener("click", () => (this._open ? this.close() : this.open()));
  }

  open() {
    if (!this._panel) return;
    this._open = true;
    this._panel.hidden = false;
    this._trigger.setAttribute("aria-expanded", "true");
    this.opened();
  }

  /** Close the popover; focus goes back to its button unless the click went elsewhere. */
  close(refocus = true) {
    if (!this._panel || !this._open) return;
    this._open = false;
    this._panel.hidden = true;
    this._trigger.setAttribute("aria-expanded", "false");
    if (refocus) this._trigger.focus();
  }

  opened() {}

  /** Up/Down/Home/End move the focus among `selector` inside the panel. */
  arrowKeys(container, selector) {
    container.addEventListener("keydown", (event) => {
      const items = [...container.querySelectorAll(selector)];
      const at = items.indexOf(this.shadowRoot.activeElement);
      let next = null;
      if (event.key === "ArrowDown") next = items[(at + 1) % items.length];
      else if (event.key === "ArrowUp") next = items[(at - 1 + items.length) % items.length];
      else if (event.key === "Home") next = items[0];
      else if (event.key === "End") next = items[items.length - 1];
      if (next) { event.preventDefault(); next.focus(); }
    });
  }
}

/** `<tenantd-inbox>`: a bell with the unread count, a popover list, live over SSE. */
class TenantdInbox extends TenantdElement {
  constructor() {
    super();
    this.items = [];
    this.count = 0;
    this.stream = null;
    this.userId = null;
  }

  disconnectedCallback() {
    super.disconnectedCallback();
    this.stop();
  }

  stop() {
    if (this.stream) this.stream.close();
    this.stream = null;
    this.userId = null;
  }

  async render() {
    const user = this.user;
    if (!user) {
      this.stop();
      this.setAttribute("data-state", "signed-out");
      this.hidden = true;
      return;
    }
    if (this.userId === user.id) return;
    this.stop();
    this.userId = user.id;
    this.hidden = false;
    this.build();
    // The stream first, then the inbox: nothing sent in between is missed (arrivals are
    // told apart by id). Each (re)opening of the stream reloads the list and the count, so
    // a reconnect after a network drop shows what was read or sent meanwhile.
    this.stream = client.notifications.subscribe((item) => this.arrived(item), {
      onState: (state) => {
        this.setAttribute("data-stream", state);
        if (state === "open") this.sync();
      },
    });
    await this.sync();
  }

  async sync() {
    const userId = this.userId;
    try {
      const [page, count] = await Promise.all([client.notifications.list({ limit: 20 }), client.notifications.unreadCount()]);
      if (userId !== this.userId) return; // signed out (or another user) meanwhile
      const listed = new Set(page.items.map((item) => item.id));
      const newer = this.items.filter((item) => !listed.has(item.id) && (!page.items.length || item.createdAt > page.items[0].createdAt));
      this.items = [...newer, ...page.items];
      this.setCount(count);
      this.renderItems();
      this.setAttribute("data-state", "ready");
    } catch (err) {
      this.fail(err);
    }
  }

  build() {
    this.bell = el("button", { type: "button", class: "trigger bell", part: "bell", "aria-haspopup": "dialog", "aria-expanded": "false", "aria-controls": "panel" });
    this.bell.innerHTML = BELL;
    this.badge = el("span", { class: "badge", part: "badge", "aria-hidden": "true", hidden: true });
    this.bell.append(this.badge);
    this.live = el("span", { class: "sr", role: "status", "aria-live": "polite" });
    this.markAll = el("button", { type: "button", class: "plain", part: "link", text: "Mark all as read" });
    this.markAll.addEventListener("click", () => this.readAll());
    this.list = el("ul", { class: "items", "aria-label": "Notifications" });
    this.error = el("p", { class: "error", role: "alert", hidden: true });
    const prefs = el("a", { href: this.baseUrl + "/notifications/preferences", part: "link", text: "Notification preferences" });
    const all = el("a", { href: this.baseUrl + "/notifications", part: "link", text: "See all", style: "float:right" });
    const panel = el(
      "div",
      { id: "panel", class: "panel", part: "panel", role: "dialog", "aria-label": "Notifications", hidden: true },
      el("div", { class: "head" }, el("h2", { text: "Notifications" }), this.markAll),
      this.error,
      this.list,
      el("div", { class: "foot" }, prefs, all),
    );
    this.paint(this.bell, this.live, panel);
    this.popover(this.bell, panel);
  }

  opened() {
    (this.list.querySelector("button") || this.markAll).focus();
  }

  setCount(count) {
    this.count = Math.max(0, count);
    this.badge.hidden = this.count === 0;
    this.badge.textContent = this.count > 99 ? "99+" : String(this.count);
    const words = this.count === 0 ? "no unread" : `${this.count} unread`;
    this.bell.setAttribute("aria-label", `Notifications, ${words}`);
    this.live.textContent = `${this.count === 0 ? "No" : this.count} unread notification${this.count === 1 ? "" : "s"}`;
    this.markAll.disabled = this.count === 0;
    this.setAttribute("data-unread", String(this.count));
  }

  renderItems() {
    if (!this.items.length) {
      this.list.replaceChildren(el("li", { class: "empty", text: "You're all caught up." }));
      return;
    }
    this.list.replaceChildren(...this.items.map((item) => this.itemNode(item)));
  }

  itemNode(item) {
    const unread = item.status === "unread";
    const meta = el("div", { class: "meta" }, el("time", { datetime: item.createdAt, title: new Date(item.createdAt).toLocaleString(), text: ago(item.createdAt) }));
    const cta = item.ctaUrl && safeUrl(item.ctaUrl, this.baseUrl);
    if (cta) meta.append(el("a", { href: cta, part: "link", text: item.ctaLabel || "Open" }));
    if (unread) {
      const mark = el("button", { type: "button", class: "plain", "aria-label": `Mark as read: ${item.title}`, text: "Mark as read" });
      mark.addEventListener("click", () => this.read(item));
      meta.append(mark);
    } else {
      meta.append(el("span", { class: "sr", text: "Read" }));
    }
    return el(
      "li",
      { class: "item", part: "item", "data-id": item.id, "data-status": item.status },
      el("span", { class: "dot", "aria-hidden": "true" }),
      el("div", { class: "grow" },
        el("p", { class: "title" }, unread ? el("span", { class: "sr", text: "Unread: " }) : null, item.title),
        item.body ? el("p", { class: "body", text: item.body }) : null,
        meta),
    );
  }

  replace(updated) {
    this.items = this.items.map((item) => (item.id === updated.id ? { ...item, ...updated } : item));
    this.renderItems();
  }

  async read(item) {
    try {
      const updated = await client.notifications.markRead(item.id);
      if (item.status === "unread") this.setCount(this.count - 1);
      this.replace(updated);
      (this.list.querySelector("button") || this.markAll).focus();
    } catch (err) { this.showError(err); }
  }

  async readAll() {
    try {
      await client.notifications.markAllRead();
      this.items = this.items.map((item) => ({ ...item, status: "read", readAt: item.readAt || new Date().toISOString() }));
      this.setCount(0);
      this.renderItems();
      if (this._open) this._panel.querySelector("a").focus();
    } catch (err) { this.showError(err); }
  }

  arrived(item) {
    if (this.items.some((known) => known.id === item.id)) return;
    this.items = [item, ...this.items].slice(0, 50);
    if (item.status === "unread") this.setCount(this.count + 1);
    this.renderItems();
    this.emit("tenantd-notification", item);
    // The server's count settles any overlap with a load that already counted this one.
    const userId = this.userId;
    client.notifications.unreadCount().then((count) => {
      if (userId === this.userId) this.setCount(count);
    }, () => {});
  }

  showError(err) {
    this.error.textContent = (err && err.message) || "Something went wrong";
    this.error.hidden = false;
  }
}

/** `<tenantd-user-button>`: avatar, name and email, profile and security links, sign out. */
class TenantdUserButton extends TenantdElement {
  render() {
    const user = this.user;
    this.removeAttribute("hidden");
    if (!user) {
      this.setAttribute("data-state", "signed-out");
      this._panel = null;
      const signIn = el("a", { class: "trigger link", part: "button", href: this.baseUrl + "/login", text: "Sign in" });
      this.paint(signIn);
      return;
    }
    const name = displayName(user);
    const button = el("button", { type: "button", class: "trigger", part: "button", "aria-haspopup": "menu", "aria-expanded": "false", "aria-controls": "menu", "aria-label": `Account menu for ${name}` },
      this.avatar(user), el("span", { class: "name", text: name }), el("span", { "aria-hidden": "true" }));
    button.lastChild.innerHTML = CHEVRON;
    const item = (href, label) => el("a", { role: "menuitem", href: this.baseUrl + href, tabindex: "-1", text: label });
    const signOut = el("button", { type: "button", role: "menuitem", tabindex: "-1", text: "Sign out" });
    signOut.addEventListener("click", () => this.signOut());
    const menu = el("div", { class: "menu", role: "menu", part: "menu", "aria-label": name },
      item("/account", "Profile"), item("/account#mfa", "Security"), signOut);
    const panel = el("div", { id: "menu", class: "panel", part: "panel", hidden: true },
      el("div", { class: "who" }, this.avatar(user),
        el("div", { class: "grow" }, el("p", { text: name }), el("p", { class: "email", text: user.email }))),
      menu);
    this.paint(button, panel);
    this.popover(button, panel);
    this.arrowKeys(menu, '[role="menuitem"]');
    this.setAttribute("data-state", "ready");
  }

  avatar(user) {
    const node = el("span", { class: "avatar", part: "avatar", "aria-hidden": "true" });
    const url = user.avatarUrl && safeUrl(user.avatarUrl, this.baseUrl);
    if (url) node.append(el("img", { src: url, alt: "" }));
    else node.textContent = initials(user);
    return node;
  }

  opened() {
    this._panel.querySelector('[role="menuitem"]').focus();
  }

  async signOut() {
    try { await client.logout(); } catch (err) { console.error("tenantd:", err); }
    this.emit("tenantd-signed-out");
  }
}

/** `<tenantd-account-switcher>`: the user's accounts; picking one makes it the active one. */
class TenantdAccountSwitcher extends TenantdElement {
  render() {
    const data = session.data;
    if (!data || !data.user) {
      this.setAttribute("data-state", "signed-out");
      this.hidden = true;
      return;
    }
    this.hidden = false;
    const memberships = data.memberships || [];
    const active = data.account;
    const current = active ? active.name : "No account";
    const button = el("button", { type: "button", class: "trigger", part: "button", "aria-haspopup": "listbox", "aria-expanded": "false", "aria-controls": "accounts", "aria-label": `Account: ${current}. Switch account` },
      el("span", { class: "name", text: current }), el("span", { "aria-hidden": "true" }));
    button.lastChild.innerHTML = CHEVRON;
    const list = el("ul", { id: "accounts", role: "listbox", "aria-label": "Accounts", part: "menu" });
    for (const m of memberships) {
      const selected = active && active.id === m.accountId;
      const option = el("li", { class: "option", role: "option", part: "option", tabindex: "-1", "aria-selected": selected ? "true" : "false", "data-id": m.accountId },
        el("span", { class: "grow" }, el("span", { text: m.accountName }), el("span", { class: "role", text: " · " + m.role })),
        el("span", { class: "check", "aria-hidden": "true", text: "✓" }));
      option.addEventListener("click", () => this.pick(m.accountId));
      option.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); this.pick(m.accountId); }
      });
      list.append(option);
    }
    this.error = el("p", { class: "error", role: "alert", hidden: true });
    const panel = el("div", { class: "panel", part: "panel", hidden: true }, list, this.error,
      el("div", { class: "foot" }, el("a", { href: this.baseUrl + "/accounts", part: "link", text: "Manage accounts" })));
    this.paint(button, panel);
    this.popover(button, panel);
    this.arrowKeys(list, '[role="option"]');
    this.setAttribute("data-state", "ready");
    this.setAttribute("data-account", active ? active.id : "");
  }

  opened() {
    (this._panel.querySelector('[aria-selected="true"]') || this._panel.querySelector('[role="option"]') || this._trigger).focus();
  }

  async pick(accountId) {
    const data = session.data;
    if (data && data.account && data.account.id === accountId) { this.close(); return; }
    try {
      const switched = await client.switchAccount(accountId);
      this.close();
      await loadMe(true); // every element re-renders with the new active account
      this.shadowRoot.querySelector("button").focus();
      this.emit("tenantd-account-switched", switched);
    } catch (err) {
      this.error.textContent = (err && err.message) || "Could not switch";
      this.error.hidden = false;
    }
  }
}

for (const [name, element] of [["tenantd-inbox", TenantdInbox], ["tenantd-user-button", TenantdUserButton], ["tenantd-account-switcher", TenantdAccountSwitcher]]) {
  if (!customElements.get(name)) customElements.define(name, element);
}

export { TenantdInbox, TenantdUserButton, TenantdAccountSwitcher };
