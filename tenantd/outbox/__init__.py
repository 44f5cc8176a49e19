"""The transactional outbox: application events written in the transaction of the change they
describe, read back in commit order (the events API, webhook deliveries). Names no domain."""

from tenantd.outbox.events import Actor, Event, emit, emit_many, payload, public_event
from tenantd.outbox.relay import Consumer, Relay, pump, read, sequence

__all__ = [
    "Actor",
    "Consumer",
    "Event",
    "Relay",
    "emit",
    "emit_many",
    "payload",
    "public_event",
    "pump",
    "read",
    "sequence",
]
