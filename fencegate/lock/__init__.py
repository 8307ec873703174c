"""`fencegate lock`: an operator's view of a lock on the Redis masters, and the way to force it free."""

__all__: list[str] = []
