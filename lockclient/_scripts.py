"""The Lua scripts Redlock runs on every master.

Release and extend must compare the owner's value and act in one step on the
server: a client-side GET followed by DEL could delete a key that expired and
was taken by someone else in between. Each constant's header names its keys,
arguments and reply; the transport (`lockclient/transport/`) sends them with EVALSHA, and as EVAL on NOSCRIPT.
"""

from __future__ import annotations

__all__ = ["EXTEND", "RELEASE"]

# KEYS[1] lock key / ARGV[1] owner value / ARGV[2] release channel
# returns 1 if the owner's key was deleted (waiters on ARGV[2] are told), 0 if absent or another owner's
RELEASE = """\
-- KEYS[1] lock key / ARGV[1] owner value / ARGV[2] release channel
-- returns 1 if the owner's key was deleted (waiters are told), 0 if absent or another owner's
if redis.call("GET", KEYS[1]) == ARGV[1] then
    redis.call("DEL", KEYS[1])
    redis.call("PUBLISH", ARGV[2], ARGV[1])
    return 1
end
return 0
"""

# KEYS[1] lock key / ARGV[1] owner value / ARGV[2] new time to live in ms
# returns 1 if the owner's key now expires in ARGV[2] ms, 0 if absent or another owner's
EXTEND = """\
-- KEYS[1] lock key / ARGV[1] owner value / ARGV[2] new time to live in ms
-- returns 1 if the owner's key now expires in ARGV[2] ms, 0 if absent or another owner's
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"""
