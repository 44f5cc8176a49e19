// Types of tenantd's Web Components (/static/components.js): the elements, and their events.

import type { Notification } from "./tenantd.js";

/** `<tenantd-inbox base-url="...">`: a bell with the unread count, the list, live over SSE. */
export declare class TenantdInbox extends HTMLElement {
  readonly baseUrl: string;
}

/** `<tenantd-user-button base-url="...">`: avatar, name, profile, security, sign out. */
export declare class TenantdUserButton extends HTMLElement {
  readonly baseUrl: string;
}

/** `<tenantd-account-switcher base-url="...">`: the user's accounts; picks the active one. */
export declare class TenantdAccountSwitcher extends HTMLElement {
  readonly baseUrl: string;
}

export interface AccountSwitched {
  account: { id: string; name: string };
  role: string;
}

declare global {
  interface HTMLElementTagNameMap {
    "tenantd-inbox": TenantdInbox;
    "tenantd-user-button": TenantdUserButton;
    "tenantd-account-switcher": TenantdAccountSwitcher;
  }
  interface DocumentEventMap {
    "tenantd-notification": CustomEvent<Notification>;
    "tenantd-account-switched": CustomEvent<AccountSwitched>;
    "tenantd-signed-out": CustomEvent<undefined>;
  }
}
