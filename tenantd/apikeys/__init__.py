"""Server API keys (`tdk_<id>_<secret>`): creation, scopes, the cached check behind
`Access.API_KEY` routes, and the audit row of what a key changed."""
