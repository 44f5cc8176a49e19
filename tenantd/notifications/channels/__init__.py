"""Delivery channels: in_app, email, sse, web_push."""
