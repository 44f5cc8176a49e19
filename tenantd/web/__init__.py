"""HTTP layer: app factory, route table, middlewares, JSON envelope, OpenAPI."""
