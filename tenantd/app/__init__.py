"""The composition root: the only package that imports every other. `bundle` builds every
domain's service object (the `Domains` record, what a CLI command opens), `factory` the aiohttp
application from the domains' routes (`routes`), job kinds, sweeps and hooks (`plugins`, `hooks`).
Nothing is imported here, so a CLI command loads no view."""
