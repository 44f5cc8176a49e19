"""Signed provider webhooks: verify the raw body, skip seen event ids, record verdicts."""
