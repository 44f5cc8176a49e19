// Types of tenantd's browser client: the npm package `tenantd-client` (and /static/tenantd.js).

export interface User {
  id: string;
  email: string;
  firstName: string;
  lastName: string;
  emailVerifiedAt: string | null;
}

export interface Membership {
  accountId: string;
  accountName: string;
  /** owner, admin, member, or a custom role's key (docs/roles.md) */
  role: string;
}

export interface Me {
  user: User | null;
  account?: { id: string; name: string } | null;
  /** owner, admin, member, or a custom role's key (docs/roles.md) */
  role?: string | null;
  memberships?: Membership[];
  features?: Record<string, boolean>;
  /** what the role holds in the active account; `*` matches any run of characters */
  permissions?: string[];
  capabilities?: Record<string, boolean>;
  authProviders?: { provider: string; createdAt: string }[];
  hasPasswordLogin?: boolean;
}

export interface Notification {
  id: string;
  eventType: string;
  title: string;
  body: string | null;
  ctaUrl: string | null;
  ctaLabel: string | null;
  status: "unread" | "read";
  readAt: string | null;
  createdAt: string;
}

export interface NotificationPage {
  items: Notification[];
  nextCursor: string | null;
}

export interface RequestOptions {
  method?: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export type StreamState = "open" | "retry" | "closed";

export interface Subscription {
  close(): void;
}

export declare class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details?: Record<string, unknown>;
}

/**
 * Point the client at another origin (default: the page's own; it must list this page's origin
 * in ALLOWED_ORIGINS). `fetch`: another fetch (tests, a runtime whose fetch keeps no cookies).
 */
export declare function configure(options: { baseUrl?: string; fetch?: typeof fetch }): void;
/** Called once when the session ends (refresh refused, logout, or another tab said so). */
export declare function onSignedOut(listener: (reason: string) => void): () => void;
/** fetch with cookies, envelope unwrapping, and one single-flight refresh-and-retry on 401. */
export declare function request<T = unknown>(path: string, options?: RequestOptions): Promise<T>;
/** Refresh the session (single-flight across tabs); false when it could not be refreshed. */
export declare function refresh(since?: number): Promise<boolean>;
export declare function me(): Promise<Me>;
export declare function login(
  email: string,
  password: string,
): Promise<{ user: User } | { mfaRequired: true; methods: string[]; ticket: string }>;
export declare function logout(options?: { everywhere?: boolean }): Promise<void>;
export declare function switchAccount(
  accountId: string,
): Promise<{ account: { id: string; name: string }; role: string }>;

export declare const notifications: {
  list(params?: { status?: "unread" | "read" | "all"; limit?: number; cursor?: string }): Promise<NotificationPage>;
  markRead(id: string): Promise<Notification>;
  markAllRead(): Promise<{ updated: number }>;
  unreadCount(): Promise<number>;
  subscribe(
    onItem: (notification: Notification) => void,
    options?: { onState?: (state: StreamState) => void; minDelay?: number; maxDelay?: number },
  ): Subscription;
};

export declare const push: {
  supported(): boolean;
  enable(options?: { serviceWorker?: string }): Promise<{ id: string; endpoint: string }>;
  disable(): Promise<void>;
};

declare const tenantd: {
  configure: typeof configure;
  onSignedOut: typeof onSignedOut;
  request: typeof request;
  refresh: typeof refresh;
  me: typeof me;
  login: typeof login;
  logout: typeof logout;
  switchAccount: typeof switchAccount;
  notifications: typeof notifications;
  push: typeof push;
  ApiError: typeof ApiError;
};
export default tenantd;
