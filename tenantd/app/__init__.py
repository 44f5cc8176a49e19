"""The composition root: the only package that imports every other. It builds the concrete
services bundle and the aiohttp application from the domains' routes, job kinds, sweeps and
hooks (listed in `plugins`)."""

from tenantd.app.factory import create_app
from tenantd.app.services import AppServices, open_services

__all__ = ["AppServices", "create_app", "open_services"]
