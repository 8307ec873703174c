"""`fencegate sql`: installs and removes the trigger of `lockclient.sql` on the user's own tables."""

__all__: list[str] = []
