"""The group commit's defaults, in a module that imports nothing: `fencegate serve --help` shows them.

A batch is the requests committed in one transaction (one fsync); its size
bounds how long it holds its row locks. PostgreSQL runs this many batches at
once per replica, each on a connection of its own: while one waits for its
commit's WAL flush, the next runs its statements; batches that touch one resource
serialize on its fence row.
"""

DEFAULT_MAX_BATCH = 256  # requests per transaction
DEFAULT_LANES = 2  # PostgreSQL batches in flight per replica
