"""Web push channel: endpoint policy (hosts), VAPID, subscriptions and delivery."""
