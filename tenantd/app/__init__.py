"""The composition root: the only package that imports every other. It builds the concrete
services bundle and the aiohttp application from the domains' routes, job kinds, sweeps and
hooks (listed in `plugins`)."""

from tenantd.app.bundle import AppServices, open_services
from tenantd.app.factory import create_app

__all__ = ["AppServices", "create_app", "open_services"]
