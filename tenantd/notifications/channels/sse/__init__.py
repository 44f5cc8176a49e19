"""SSE channel: the stream endpoint (endpoint.py) and the per-process feed (feed.py)."""
