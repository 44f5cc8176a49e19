"""The hosted pages (Jinja2, progressively enhanced) and the browser client tenantd.js."""
