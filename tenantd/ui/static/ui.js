// Progressive enhancement of tenantd's hosted pages. Every page works without this file;
// with it: the verification link signs in with no click, the account switcher switches on
// change, forms validate inline, the inbox updates live (SSE) and push can be turned on.
import { onSignedOut, notifications, push, request } from "./tenantd.js";
import "./passkeys.js";

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];
document.documentElement.classList.add("js");
const signedIn = document.body.dataset.signedIn === "true";

function showSignedOut() {
  const banner = $("#signed-out");
  if (banner) banner.hidden = false;
  document.body.dataset.signedIn = "false";
  const live = $("[data-live]");
  if (live) { live.dataset.state = "closed"; live.textContent = ""; }
}
onSignedOut(showSignedOut);

// The emailed verification link: confirm at once (a mail scanner's GET never does).
for (const form of $$("form[data-autosubmit]")) {
  form.requestSubmit ? form.requestSubmit() : form.submit();
}

// Account switcher in the header: switching is choosing.
for (const form of $$("form[data-switcher]")) {
  const select = $("select", form);
  if (select) select.addEventListener("change", () => form.requestSubmit());
}

// Destructive buttons ask first.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-confirm]");
  if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
});

// Inline validation with the browser's own messages, shown under the field.
for (const form of $$("form[data-validate]")) {
  form.addEventListener("submit", (event) => {
    let first = null;
    for (const input of $$("input", form)) {
      if (input.type === "hidden") continue;
      const note = input.parentElement.querySelector(".field-error[data-inline]");
      if (note) note.remove();
      if (input.checkValidity()) { input.removeAttribute("aria-invalid"); continue; }
      input.setAttribute("aria-invalid", "true");
      const message = document.createElement("div");
      message.className = "field-error";
      message.dataset.inline = "";
      message.id = "inline-" + input.name;
      message.textContent = input.validationMessage;
      input.setAttribute("aria-describedby", message.id);
      input.insertAdjacentElement("afterend", message);
      first = first || input;
    }
    if (first) { event.preventDefault(); first.focus(); }
  });
}

const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const when = (iso) => dateFormat.format(new Date(iso));
for (const time of $$("time[datetime]")) {
  const parsed = new Date(time.dateTime);
  if (!Number.isNaN(parsed.getTime())) time.textContent = when(time.dateTime);
}

function setUnread(count) {
  for (const badge of $$("[data-unread-count]")) { badge.textContent = String(count); badge.dataset.count = String(count); }
  const label = $("[data-unread-text]");
  if (label) label.textContent = label.textContent.replace(/\d+/, String(count));
}

function renderItem(item) {
  const li = document.createElement("li");
  li.className = "note fresh" + (item.status === "unread" ? " unread" : "");
  li.dataset.id = item.id;
  const dot = document.createElement("span");
  dot.className = "dot";
  dot.setAttribute("aria-hidden", "true");
  const body = document.createElement("div");
  body.className = "grow";
  const title = document.createElement("p");
  title.className = "note-title";
  title.textContent = item.title || "";
  body.append(title);
  if (item.body) {
    const text = document.createElement("p");
    text.className = "note-body";
    text.textContent = item.body;
    body.append(text);
  }
  const meta = document.createElement("div");
  meta.className = "row";
  const time = document.createElement("time");
  time.dateTime = item.createdAt;
  time.textContent = when(item.createdAt);
  meta.append(time);
  if (item.ctaUrl && /^(\/(?!\/)|https:\/\/)/.test(item.ctaUrl)) {
    const link = document.createElement("a");
    link.className = "small";
    link.href = item.ctaUrl;
    link.textContent = item.ctaLabel || "Open";
    meta.append(link);
  }
  body.append(meta);
  li.append(dot, body);
  if (item.status === "unread") {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary small-button";
    button.textContent = document.querySelector("[data-mark-read] button")?.textContent || "Mark read";
    button.addEventListener("click", () => markRead(li, item.id));
    li.append(button);
  }
  return li;
}

async function markRead(li, id) {
  await notifications.markRead(id);
  li.classList.remove("unread");
  li.querySelector("form[data-mark-read], button")?.remove();
  setUnread(await notifications.unreadCount());
}

const inbox = $("[data-inbox]");
if (inbox && signedIn) {
  // Mark read without leaving the page.
  for (const form of $$("form[data-mark-read]", inbox)) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      markRead(form.closest("li"), form.closest("li").dataset.id).catch(() => form.submit());
    });
  }
  const live = $("[data-live]");
  const labels = live ? { open: live.dataset.labelOpen, retry: live.dataset.labelRetry } : {};
  if (document.body.dataset.sse === "true") {
    notifications.subscribe(
      (item) => {
        if ($(`[data-id="${CSS.escape(item.id)}"]`, inbox)) return;
        inbox.prepend(renderItem(item));
        const empty = $("[data-inbox-empty]");
        if (empty) empty.hidden = true;
        notifications.unreadCount().then(setUnread, () => {});
      },
      {
        onState(state) {
          if (!live) return;
          live.dataset.state = state;
          live.textContent = labels[state] || "";
        },
      },
    );
  }
}

// Browser push opt-in (only when the server has web push configured).
const pushCard = $("[data-push-card]");
if (pushCard && push.supported()) {
  pushCard.hidden = false;
  const button = $("[data-push-enable]", pushCard);
  const status = $("[data-push-status]", pushCard);
  const already = await navigator.serviceWorker.getRegistration().then((r) => r && r.pushManager.getSubscription()).catch(() => null);
  if (already) { status.textContent = button.dataset.on; button.hidden = true; }
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await push.enable();
      status.textContent = button.dataset.on;
      button.hidden = true;
    } catch (err) {
      status.textContent = Notification.permission === "denied" ? button.dataset.denied : String(err.message || err);
      button.disabled = false;
    }
  });
}

// The sessions block of /account: shown when the server has the sessions list.
const sessions = $("[data-sessions]");
if (sessions && signedIn) {
  request("/api/v1/auth/sessions").then((list) => {
    if (!Array.isArray(list)) return;
    const body = $("[data-sessions-list]", sessions);
    const template = $("template[data-session-row]", sessions);
    const render = (items) => {
      body.replaceChildren();
      for (const s of items) {
        const row = template.content.firstElementChild.cloneNode(true);
        $('[data-f="browser"]', row).textContent = s.browser || "Browser";
        $('[data-f="os"]', row).textContent = s.os || "";
        $('[data-f="current"]', row).hidden = !s.current;
        $('[data-f="meta"]', row).textContent = [s.ip, s.lastUsedAt && new Date(s.lastUsedAt).toLocaleString()].filter(Boolean).join(" · ");
        const end = $('[data-f="end"]', row);
        if (s.current) end.remove();
        else end.addEventListener("click", async () => { await request(`/api/v1/auth/sessions/${s.id}`, { method: "DELETE" }); row.remove(); });
        body.append(row);
      }
    };
    render(list);
    sessions.hidden = false;
    $("[data-revoke-others]", sessions).addEventListener("click", async () => {
      await request("/api/v1/auth/sessions/revoke-others", { method: "POST" });
      render(list.filter((s) => s.current));
    });
  }, () => { /* no sessions feature on this server: the block stays hidden */ });
}
