"""Pub/sub over PostgreSQL LISTEN/NOTIFY (one listening connection per process)."""

from tenantd.pubsub.hub import PubSubHub, Subscription, quote_channel

__all__ = ["PubSubHub", "Subscription", "quote_channel"]
