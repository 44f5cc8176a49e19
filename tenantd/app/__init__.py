"""The composition root: the only package that imports every other. It builds every domain's
service object (the `Domains` record) and the aiohttp application from the domains' routes,
job kinds, sweeps and hooks (listed in `plugins`)."""

from tenantd.app.bundle import Domains, open_services
from tenantd.app.factory import create_app

__all__ = ["Domains", "create_app", "open_services"]
