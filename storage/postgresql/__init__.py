"""PostgreSQL's side of the store: group commit over asyncpg lanes, plain reads on kept connections.

Each module runs the shared core (`storage.fenced`, `storage.statements`,
`storage.records`, `storage.chain`) on asyncpg, loaded only with the
`[postgresql]` extra; nothing of the core imports this package.
"""
