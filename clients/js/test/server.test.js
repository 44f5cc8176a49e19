// The server half (src/server.js) against the live server: access tokens verified from the
// JWKS (cached, one fetch for many checks), send, the events cursor, a live webhook verified.
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { test } from "node:test";

import {
  JwksCache,
  Tenantd,
  TenantdError,
  TokenError,
  WebhookVerificationError,
  verifyAccessToken,
  verifyWebhook,
} from "../src/server.js";
import { API_KEY, BASE, signIn } from "../testing/live.js";

const b64url = (value) => Buffer.from(typeof value === "string" ? value : JSON.stringify(value)).toString("base64url");

function countingFetch() {
  const counter = { n: 0 };
  const wrapped = (url, init) => {
    counter.n += 1;
    return fetch(url, init);
  };
  return { fetch: wrapped, counter };
}

test("verifies access tokens with one JWKS fetch, and refuses altered ones", async () => {
  const { token, userId } = await signIn();
  const { fetch: counted, counter } = countingFetch();
  const tenantd = new Tenantd({ baseUrl: BASE, fetch: counted });

  const all = await Promise.all(Array.from({ length: 20 }, () => tenantd.verifyAccessToken(token)));
  for (const claims of all) {
    assert.equal(claims.sub, userId);
    assert.equal(claims.iss, "tenantd");
    assert.ok(claims.sid && claims.exp > Date.now() / 1000);
  }
  assert.equal(counter.n, 1, "the JWKS is fetched once for concurrent checks");
  await tenantd.verifyAccessToken(token);
  assert.equal(counter.n, 1, "and kept afterwards");

  const [header, payload, signature] = token.split(".");
  const claims = JSON.parse(Buffer.from(payload, "base64url"));
  const forged = `${header}.${b64url({ ...claims, sub: "someone-else" })}.${signature}`;
  const cases = {
    "an altered payload": forged,
    "a cut signature": `${header}.${payload}.${signature.slice(0, 20)}`,
    "alg none": `${b64url({ alg: "none", kid: JSON.parse(Buffer.from(header, "base64url")).kid })}.${payload}.`,
    "HS256 with the public key": `${b64url({ ...JSON.parse(Buffer.from(header, "base64url")), alg: "HS256" })}.${payload}.${signature}`,
    "not a JWT": "abc",
    "a junk segment": `${header}.@@@.${signature}`,
  };
  for (const [name, bad] of Object.entries(cases)) {
    await assert.rejects(tenantd.verifyAccessToken(bad), TokenError, name);
  }
  await assert.rejects(tenantd.verifyAccessToken(token, { issuer: "someone" }), /wrong issuer/);
  await assert.rejects(tenantd.verifyAccessToken(token, { audience: "my-api" }), /wrong audience/);
  const later = () => (claims.exp + 60) * 1000;
  await assert.rejects(tenantd.verifyAccessToken(token, { now: later }), /expired/);

  // Unknown kids refetch the JWKS at most once per cooldown.
  const unknown = `${b64url({ ...JSON.parse(Buffer.from(header, "base64url")), kid: "forged" })}.${payload}.${signature}`;
  let now = Date.now();
  const jwks = new JwksCache(`${BASE}/.well-known/jwks.json`, { fetch: counted, cooldownMs: 30_000, now: () => now });
  await verifyAccessToken(token, jwks);
  const before = counter.n;
  for (let i = 0; i < 5; i += 1) await assert.rejects(verifyAccessToken(unknown, jwks), /unknown key/);
  assert.equal(counter.n, before, "within the cooldown an unknown kid fetches nothing");
  now += 31_000;
  await assert.rejects(verifyAccessToken(unknown, jwks), /unknown key/);
  assert.equal(counter.n, before + 1, "after it, once");
  now += 300_000;
  await verifyAccessToken(token, jwks, { now: () => Date.now() });
  assert.equal(counter.n, before + 2, "expired keys are fetched again");
});

test("sends a notification (idempotent), and reports refusals with their code", async () => {
  const { userId } = await signIn();
  const tenantd = new Tenantd({ baseUrl: BASE, apiKey: API_KEY });
  const key = `js-${randomBytes(6).toString("hex")}`;
  const notification = { type: "ping.simple", recipientUserId: userId, payload: { n: 1 }, idempotencyKey: key };
  const sent = await tenantd.send(notification);
  assert.ok(["queued", "created"].includes(sent.status), sent.status);
  assert.equal((await tenantd.send(notification)).id, sent.id);

  await assert.rejects(tenantd.send({ type: "ping.simple", recipientUserId: userId, payload: { n: "many" } }), (error) => {
    assert.ok(error instanceof TenantdError);
    assert.equal(error.status, 422);
    return true;
  });
  const stranger = new Tenantd({ baseUrl: BASE, apiKey: "tdk_nope_nope" });
  await assert.rejects(stranger.send(notification), (error) => error.status === 401);
});

test("reads every event through the cursor; the cursor stays put when nothing is new", async () => {
  const tenantd = new Tenantd({ baseUrl: BASE, apiKey: API_KEY });
  const seen = [];
  let cursor;
  for await (const page of tenantd.eventPages(undefined, { limit: 2 })) {
    seen.push(...page.items);
    cursor = page.nextCursor;
  }
  assert.ok(seen.some((event) => event.type === "user.created"), JSON.stringify(seen.map((e) => e.type)));
  assert.equal(new Set(seen.map((event) => event.id)).size, seen.length, "no event twice");
  const again = await tenantd.events({ after: cursor });
  assert.deepEqual(again.items, []);
  assert.equal(again.nextCursor, cursor);
  const typed = await tenantd.events({ types: ["user.created"] });
  assert.ok(typed.items.length > 0 && typed.items.every((event) => event.type === "user.created"));
});

test("verifies a live webhook delivery, and refuses tampering and stale timestamps", async () => {
  const tenantd = new Tenantd({ baseUrl: BASE, apiKey: API_KEY });
  let resolveDelivery;
  const delivered = new Promise((resolve) => {
    resolveDelivery = resolve;
  });
  const receiver = createServer((req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      res.writeHead(204).end();
      resolveDelivery({ headers: req.headers, body: Buffer.concat(chunks) });
    });
  });
  await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  try {
    const url = `http://127.0.0.1:${receiver.address().port}/hooks/tenantd`;
    const endpoint = await tenantd.call("POST", "/api/v1/webhook-endpoints", { body: { url } });
    assert.match(endpoint.secret, /^whsec_/);
    await tenantd.call("POST", `/api/v1/webhook-endpoints/${endpoint.endpoint.id}/test`);
    const { headers, body } = await delivered;

    const event = await verifyWebhook(endpoint.secret, headers, body);
    assert.equal(event.type, "webhook.test");
    assert.equal(event.id, headers["webhook-id"]);
    assert.deepEqual(await verifyWebhook(endpoint.secret, new Headers(headers), body.toString()), event);

    const tampered = Buffer.from(body.toString().replace("webhook.test", "webhook.tesT"));
    await assert.rejects(verifyWebhook(endpoint.secret, headers, tampered), WebhookVerificationError);
    const otherSecret = `whsec_${randomBytes(24).toString("base64")}`;
    await assert.rejects(verifyWebhook(otherSecret, headers, body), WebhookVerificationError);
    const late = () => (Number(headers["webhook-timestamp"]) + 301) * 1000;
    await assert.rejects(verifyWebhook(endpoint.secret, headers, body, { now: late }), /tolerance/);
    const early = () => (Number(headers["webhook-timestamp"]) - 301) * 1000;
    await assert.rejects(verifyWebhook(endpoint.secret, headers, body, { now: early }), /tolerance/);
    await assert.rejects(
      verifyWebhook(endpoint.secret, { ...headers, "webhook-id": "evt_other" }, body),
      WebhookVerificationError,
    );
    const { "webhook-signature": _, ...unsigned } = headers;
    await assert.rejects(verifyWebhook(endpoint.secret, unsigned, body), /missing/);
  } finally {
    receiver.close();
  }
});

test("a rotation's two signatures: either secret verifies", async () => {
  const secrets = [randomBytes(24), randomBytes(24)].map((bytes) => `whsec_${bytes.toString("base64")}`);
  const id = "evt_1";
  const timestamp = String(Math.floor(Date.now() / 1000));
  const body = JSON.stringify({ id, type: "user.created", data: {} });
  const sign = (secret) =>
    createHmac("sha256", Buffer.from(secret.slice(6), "base64")).update(`${id}.${timestamp}.${body}`).digest("base64");
  const headers = {
    "webhook-id": id,
    "webhook-timestamp": timestamp,
    "webhook-signature": `v1,${sign(secrets[0])} v1,${sign(secrets[1])}`,
  };
  for (const secret of secrets) assert.equal((await verifyWebhook(secret, headers, body)).type, "user.created");
  const v2 = { ...headers, "webhook-signature": `v2,${sign(secrets[0])}` };
  await assert.rejects(verifyWebhook(secrets[0], v2, body), /no matching signature/);
});

test("ES256 tokens (ACCESS_TOKEN_ALG=ES256) verify too; a key is used only for its own alg", async () => {
  const { subtle } = globalThis.crypto;
  const pair = await subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"]);
  const jwk = { ...(await subtle.exportKey("jwk", pair.publicKey)), kid: "es-1", alg: "ES256", use: "sig" };
  const jwksFetch = async () => new Response(JSON.stringify({ keys: [jwk] }), { headers: { "Content-Type": "application/json" } });
  const jwks = new JwksCache("https://auth.example.com/.well-known/jwks.json", { fetch: jwksFetch });
  const now = Math.floor(Date.now() / 1000);
  const sign = async (header, claims) => {
    const input = `${b64url(header)}.${b64url(claims)}`;
    const signature = await subtle.sign({ name: "ECDSA", hash: "SHA-256" }, pair.privateKey, new TextEncoder().encode(input));
    return `${input}.${Buffer.from(signature).toString("base64url")}`;
  };
  const claims = { sub: "u1", sid: "s1", jti: "j1", iat: now, exp: now + 60, iss: "tenantd" };
  const token = await sign({ alg: "ES256", kid: "es-1", typ: "JWT" }, claims);
  assert.equal((await verifyAccessToken(token, jwks)).sub, "u1");
  const asEdDSA = await sign({ alg: "EdDSA", kid: "es-1" }, claims);
  await assert.rejects(verifyAccessToken(asEdDSA, jwks), /unknown key/);
  const noSid = await sign({ alg: "ES256", kid: "es-1" }, { ...claims, sid: undefined });
  await assert.rejects(verifyAccessToken(noSid, jwks), /no sid/);
  const early = await sign({ alg: "ES256", kid: "es-1" }, { ...claims, nbf: now + 600 });
  await assert.rejects(verifyAccessToken(early, jwks), /not yet valid/);
});
