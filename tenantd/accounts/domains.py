"""Email domains for claiming: the fixed list of public domains that never claim."""

from __future__ import annotations

from tenantd.addresses import email_domain

# INTERFACE.md "Public email domains": exactly 51 entries, compared lower-cased.
PUBLIC_EMAIL_DOMAINS: frozenset[str] = frozenset(
    """
    gmail.com googlemail.com yahoo.com yahoo.co.uk yahoo.fr ymail.com outlook.com
    hotmail.com hotmail.co.uk hotmail.fr live.com live.co.uk msn.com icloud.com
    me.com mac.com aol.com proton.me protonmail.com pm.me gmx.com gmx.net gmx.de
    web.de mail.com zoho.com yandex.com yandex.ru mail.ru qq.com 163.com 126.com
    fastmail.com tutanota.com tuta.io hey.com comcast.net verizon.net att.net
    sbcglobal.net bellsouth.net cox.net btinternet.com orange.fr free.fr
    laposte.net t-online.de libero.it rediffmail.com naver.com hanmail.net
    """.split()  # noqa: SIM905 (the list as INTERFACE.md prints it)
)


def claimable_domain(email: str) -> str | None:
    """The normalised domain of an address (IDNA, lower case), or None when it is public or
    malformed."""
    domain = email_domain(email)
    if not domain or "." not in domain or domain in PUBLIC_EMAIL_DOMAINS:
        return None
    return domain
