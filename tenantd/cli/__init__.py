"""Operator CLI (Typer + Rich): thin commands over the same services as the API."""
