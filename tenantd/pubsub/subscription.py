"""One subscriber of a bus channel, and what every bus implementation shares about them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

MessageCallback = Callable[[str, str], None]  # (channel, payload); must not block
GapHandler = Callable[[], None]  # messages may have been missed: catch up from storage


@dataclass(eq=False)
class Subscription:
    channel: str
    callback: MessageCallback
    on_gap: GapHandler | None = None
    active: bool = field(default=True)


def dispatch(subscriptions: Iterable[Subscription], channel: str, payload: str) -> None:
    for subscription in list(subscriptions):
        try:
            subscription.callback(channel, payload)
        except Exception:
            log.exception("pubsub subscriber failed")


def tell_gap(channels: dict[str, set[Subscription]]) -> None:
    """A reconnect: every subscriber may have missed messages."""
    for subscribers in list(channels.values()):
        for subscription in list(subscribers):
            if subscription.on_gap is not None:
                try:
                    subscription.on_gap()
                except Exception:
                    log.exception("pubsub gap handler failed")
