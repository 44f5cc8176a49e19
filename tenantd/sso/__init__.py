"""Single sign-on per account: SAML 2.0 and OpenID Connect connections (issue 30 part 1)."""
