// tenantd's push service worker: shows each pushed notification and opens its link on click.
// The push payload is the SSE envelope: {"type": "notification.created", "notification": {...}}.
self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("push", (event) => {
  let message = {};
  try { message = event.data ? event.data.json() : {}; } catch { message = {}; }
  const item = message.notification || {};
  const title = item.title || "New notification";
  event.waitUntil(
    self.registration.showNotification(title, {
      body: item.body || "",
      tag: item.id || undefined,
      data: { url: item.ctaUrl || "/notifications" },
    }),
  );
  event.waitUntil(
    self.clients.matchAll({ type: "window" }).then((clients) => {
      for (const client of clients) client.postMessage({ type: "tenantd:push", notification: item });
    }),
  );
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const raw = (event.notification.data && event.notification.data.url) || "/notifications";
  const url = new URL(raw, self.location.origin);
  const target = url.origin === self.location.origin ? url.href : new URL("/notifications", self.location.origin).href;
  event.waitUntil(self.clients.openWindow(target));
});
