// Types of tenantd-client/server: the server half of tenantd's client.

export declare const ALGORITHMS: readonly ["EdDSA", "ES256"];

/** The claims of a tenantd access token. */
export interface AccessClaims {
  sub: string;
  sid: string;
  jti: string;
  iat: number;
  exp: number;
  iss: string;
  aid?: string | null;
  aud?: string | string[];
  act?: { sub: string };
  [claim: string]: unknown;
}

export declare class TokenError extends Error {}
export declare class WebhookVerificationError extends Error {}
export declare class TenantdError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details?: Record<string, unknown>;
  readonly retryAfter?: number;
}

export interface JwksCacheOptions {
  fetch?: typeof fetch;
  /** How long the keys are kept (ms; default 300000, the JWKS's Cache-Control). */
  maxAgeMs?: number;
  /** An unknown kid refetches at most once per this (ms; default 30000). */
  cooldownMs?: number;
  now?: () => number;
}

export declare class JwksCache {
  constructor(jwksUrl: string | URL, options?: JwksCacheOptions);
  readonly url: string;
  /** How many times the JWKS was fetched. */
  readonly fetches: number;
  key(kid: string, alg: string): Promise<CryptoKey | null>;
  refresh(): Promise<void>;
}

export interface VerifyOptions {
  issuer?: string;
  audience?: string;
  algorithms?: readonly string[];
  leewaySeconds?: number;
  now?: () => number;
}

export declare function verifyAccessToken(
  token: string,
  jwks: JwksCache,
  options?: VerifyOptions,
): Promise<AccessClaims>;

export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

/** A tenantd event (the webhook body and each item of the events API). */
export interface TenantdEvent {
  id: string;
  type: string;
  occurredAt: string;
  accountId?: string | null;
  actor: { type: "user" | "operator" | "system" | "api_key"; id?: string | null };
  data: Record<string, unknown>;
  previous?: Record<string, unknown>;
}

export declare function verifyWebhook(
  secret: string,
  headers: WebhookHeaders,
  body: string | Uint8Array | ArrayBuffer,
  options?: { toleranceSeconds?: number; now?: () => number },
): Promise<TenantdEvent>;

export interface Notification {
  type: string;
  recipientUserId: string;
  payload: Record<string, unknown>;
  idempotencyKey?: string;
  deliverAt?: string;
  delaySeconds?: number;
}

export interface SendResult {
  id: string;
  status: string;
}

export interface EventPage {
  items: TenantdEvent[];
  nextCursor: string;
  hasMore: boolean;
}

export interface TenantdOptions {
  /** tenantd's PUBLIC_BASE_URL. */
  baseUrl: string;
  /** An API key `tdk_...` (scopes `notifications:send`, `events:read` as needed). */
  apiKey?: string;
  fetch?: typeof fetch;
  issuer?: string;
  audience?: string;
  jwks?: JwksCache;
}

export declare class Tenantd {
  constructor(options: TenantdOptions);
  readonly baseUrl: string;
  readonly jwks: JwksCache;
  verifyAccessToken(token: string, options?: VerifyOptions): Promise<AccessClaims>;
  send(notification: Notification): Promise<SendResult>;
  sendBatch(items: Notification[]): Promise<{ items: unknown[] }>;
  events(params?: { after?: string; types?: string[] | string; limit?: number }): Promise<EventPage>;
  eventPages(after?: string, params?: { types?: string[] | string; limit?: number }): AsyncGenerator<EventPage>;
}

declare const server: {
  Tenantd: typeof Tenantd;
  JwksCache: typeof JwksCache;
  verifyAccessToken: typeof verifyAccessToken;
  verifyWebhook: typeof verifyWebhook;
  TokenError: typeof TokenError;
  WebhookVerificationError: typeof WebhookVerificationError;
  TenantdError: typeof TenantdError;
  ALGORITHMS: typeof ALGORITHMS;
};
export default server;
