"""The one normalised form of an email address, used by every comparison in the service.

Users, suppression rows, invitations, domain claims, webhook verdicts and OpenID Connect
emails all compare `normalize_email(...)`: stripped, lower-cased, the domain in IDNA
(punycode, UTS 46 mapping) without a trailing dot. `Dave@Exämple.COM.` and
`dave@xn--exmple-cua.com` are the same address.

`canonical_email` is the one parser of addresses from the outside: the result is exactly one
mailbox, a dot-atom local part (RFC 5322 atext, non-ASCII letters as RFC 6531 allows) at a
host name. Lists (`a@x.example,b@y.example`), display names (`Ann <a@x.example>`), quoted
local parts, address literals (`a@[127.0.0.1]`, `a@127.0.0.1`) and stray punctuation
(`a@x.example,`) have no normal form.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import idna

MAX_EMAIL_LENGTH = 320
BAD_DOMAIN = "the part after the @ is not a valid domain name"

# What no address may hold: whitespace (exactly `str.isspace()`: re's \s is the same test),
# C0 controls and DEL. One regex search instead of a Python loop over the characters
# (webhook batches check hundreds of addresses; tests compare it on every code point).
_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f]")
# A dot-atom: runs of RFC 5322 atext (plus any non-ASCII character, judged by category
# below) joined by single dots. Everything else ASCII ("(),:;<>@[\\] and quotes) is refused.
_DOT_ATOM = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-\x80-\U0010ffff]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-\x80-\U0010ffff]+)*\Z"
)
# A host name label in its ASCII form (underscores kept, as before: DNS allows them).
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?\Z")
NOT_ONE_MAILBOX = "must be one email address (name@example.com), nothing more"


class InvalidEmail(ValueError):
    """An address with no normalised form (callers at the API answer it with a 422)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@lru_cache(maxsize=4096)  # a pure function; webhook batches repeat a few domains
def _ascii_domain(domain: str) -> str:
    """The lower-case IDNA form of a domain, without trailing dots; InvalidEmail if none."""
    if domain.isascii():
        # With std3 rules off, UTS 46 maps every ASCII character to its lower case and
        # nothing else (tests check all 128), so the common case skips the table walk.
        mapped = domain.lower()
    else:
        try:
            # UTS 46 maps case, full-width dots and compatibility forms; std3 rules off so
            # that ASCII names DNS allows in practice (underscores) keep working as before.
            mapped = idna.uts46_remap(domain, std3_rules=False, transitional=False)
        except idna.IDNAError:
            raise InvalidEmail(BAD_DOMAIN) from None
    mapped = mapped.rstrip(".")
    labels = mapped.split(".")
    if not mapped or any(not label for label in labels):
        raise InvalidEmail(BAD_DOMAIN)
    encoded = []
    for label in labels:
        try:
            if not label.isascii():
                label = idna.alabel(label).decode("ascii")
            elif label.startswith("xn--"):
                idna.ulabel(label)  # an A-label must decode to a valid U-label
        except (idna.IDNAError, UnicodeError):
            raise InvalidEmail(BAD_DOMAIN) from None
        encoded.append(label)
    return ".".join(encoded)


def canonical_email(address: str) -> str:
    """The normalised form of a valid address; InvalidEmail (422) when it has none.

    For input from the outside (API bodies, the CLI, an identity provider's claim).
    """
    address = address.strip()
    local, sep, domain = address.rpartition("@")
    if not sep:
        raise InvalidEmail("an email address needs an @")
    if not local:
        raise InvalidEmail("the part before the @ is empty")
    if _UNSAFE.search(address):
        raise InvalidEmail("an email address cannot hold spaces or control characters")
    if not _one_local_part(local):
        raise InvalidEmail(NOT_ONE_MAILBOX)
    ascii_domain = _ascii_domain(domain)
    labels = ascii_domain.split(".")
    if not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        raise InvalidEmail(NOT_ONE_MAILBOX)  # an address literal, a list, punctuation
    normal = f"{local.lower()}@{ascii_domain}"
    if len(normal) > MAX_EMAIL_LENGTH:
        raise InvalidEmail(f"an email address has at most {MAX_EMAIL_LENGTH} characters")
    return normal


def _one_local_part(local: str) -> bool:
    """A dot-atom whose non-ASCII characters are letters, marks, digits, punctuation or
    symbols (no format, private-use, unassigned or separator characters)."""
    if _DOT_ATOM.match(local) is None:
        return False
    return all(ch.isascii() or unicodedata.category(ch)[0] in "LMNPS" for ch in local)


def normalize_email(address: str) -> str:
    """The normalised form for comparisons; never raises.

    A valid address gets exactly `canonical_email`. Anything else (a domain IDNA refuses, a
    malformed webhook field) is still folded the same way as far as it goes, lower-cased and
    without trailing dots, so it can be compared and refused by `is_plausible`.
    """
    try:
        return canonical_email(address)
    except InvalidEmail:
        pass
    local, sep, domain = address.strip().rpartition("@")
    if not sep:
        return address.strip().lower()
    return f"{local.lower()}@{domain.lower().rstrip('.')}"


def email_domain(address: str) -> str:
    """The normalised domain of an address ('' when it has no @)."""
    _local, sep, domain = normalize_email(address).rpartition("@")
    return domain if sep else ""


def is_plausible(address: str) -> bool:
    """A non-empty local part, '@', a domain, no whitespace or control characters."""
    if not address or len(address) > MAX_EMAIL_LENGTH:
        return False
    local, sep, domain = address.rpartition("@")
    if not (sep and local and domain):
        return False
    return _UNSAFE.search(address) is None
