"""Notifications: event registry, dispatch (inline or queued), channels, inbox API.

Applications define events with these names and call `send`:

    from tenantd.notifications import EventDefinition, Dedup, InAppContent, EmailContent, send
"""

from tenantd.notifications.registry import (
    Dedup,
    EmailContent,
    EventDefinition,
    EventRegistry,
    InAppContent,
    RegistryError,
    UnknownEventType,
)
from tenantd.notifications.service import InvalidPayload, SendOutcome, UnknownRecipient, send

__all__ = [
    "Dedup",
    "EmailContent",
    "EventDefinition",
    "EventRegistry",
    "InAppContent",
    "InvalidPayload",
    "RegistryError",
    "SendOutcome",
    "UnknownEventType",
    "UnknownRecipient",
    "send",
]
