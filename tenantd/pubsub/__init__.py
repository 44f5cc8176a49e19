"""The bus: announcements every process hears (PostgreSQL LISTEN/NOTIFY, NATS or Redis)."""

from tenantd.pubsub.bus import PUBSUB, Bus
from tenantd.pubsub.hub import PubSubHub, quote_channel
from tenantd.pubsub.subscription import Subscription

__all__ = ["PUBSUB", "Bus", "PubSubHub", "Subscription", "quote_channel"]
