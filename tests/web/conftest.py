"""The web tests start apps with env overrides like the email tests do."""

from tests.email.conftest import start

__all__ = ["start"]
