"""Notifications: event registry, dispatch (inline or queued), channels, inbox API.

Applications define events with these names and call `send`:

    from tenantd.notifications import EventDefinition, Dedup, InAppContent, EmailContent, send
"""

from tenantd.notifications.registry import (
    Dedup,
    Digest,
    EmailContent,
    EventDefinition,
    EventRegistry,
    InAppContent,
    RegistryError,
    Throttle,
    UnknownEventType,
)
from tenantd.notifications.service import (
    InvalidPayload,
    SendOutcome,
    UnknownRecipient,
    cancel_scheduled,
    send,
)

__all__ = [
    "Dedup",
    "Digest",
    "EmailContent",
    "EventDefinition",
    "EventRegistry",
    "InAppContent",
    "InvalidPayload",
    "RegistryError",
    "SendOutcome",
    "Throttle",
    "UnknownEventType",
    "UnknownRecipient",
    "cancel_scheduled",
    "send",
]
