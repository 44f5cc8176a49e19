"""Sign-in with OpenID Connect providers (authorization code flow with PKCE).

discovery.py and jwks.py cache provider metadata and signing keys, client.py speaks HTTP to
the provider, flow.py holds the pure protocol pieces (state cookie, PKCE, ID token checks),
service.py the linking and provisioning rules, views.py the routes.
"""
