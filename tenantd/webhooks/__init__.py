"""Outbound webhooks: operator-managed endpoints, Standard Webhooks deliveries of outbox
events through the durable queue, and the events API."""
