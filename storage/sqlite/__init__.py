"""SQLite's side of the store: group commit on one writer connection, plain reads, vacuum.

Each module runs the shared core (`storage.fenced`, `storage.statements`,
`storage.records`, `storage.chain`) on stdlib `sqlite3`; nothing of the
core imports this package.
"""
