"""The email suppression list: addresses no mail goes to, the provider verdict webhooks that
fill it, and the operator's verbs on it. Sending (tenantd/email) is handed the list."""
