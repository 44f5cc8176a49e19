"""Email: sender protocol and providers, templates, the suppression list, provider webhooks."""
