"""Live subscriptions: a view's changes streamed to clients as they are applied."""
