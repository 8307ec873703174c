"""What a lock looks like on the masters, and the operator's way to free it.

`inspect` reads the lock key on every master at once (value and PTTL in one
script, so they belong together) and reads nothing into a master that did not
answer: the lock is held only when one value sits on a quorum, free only when
no value can, and unknown otherwise. `force_unlock` deletes the key on every
master that answers, whoever holds it, and tells waiters as a release does.
It never touches a later holder's lock by mistake afterwards: the old
holder's release compares its own value, which is gone.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from lockclient._nodes import Master, release_channel
from lockclient._quorum import display_url, fan_out, reason
from lockclient.errors import ConfigurationError
from lockclient.lease import token_of
from lockclient.transport.codec import Command, Script

__all__ = ["ForcedUnlock", "LockState", "MasterLock", "force_unlock", "inspect"]

# KEYS[1] lock key
# returns {value, PTTL in ms}: value is nil when there is no key (PTTL -2); PTTL -1: no expiry
INSPECT = Script("""\
-- KEYS[1] lock key
-- returns {value or nil, PTTL in ms (-2: no key, -1: no expiry)}
return {redis.call("GET", KEYS[1]), redis.call("PTTL", KEYS[1])}
""")

# KEYS[1] lock key / ARGV[1] release channel / ARGV[2] "" (any holder) or "<token>:" (only that token's)
# returns {value or nil, PTTL in ms} as they were; a value starting with ARGV[2] is deleted and waiters
# are told, as by a release
FORCE = Script("""\
-- KEYS[1] lock key / ARGV[1] release channel / ARGV[2] "" (any holder) or "<token>:" (only that token's)
-- returns {value or nil, PTTL in ms} as they were; a value starting with ARGV[2] is deleted, waiters told
local value = redis.call("GET", KEYS[1])
local pttl = redis.call("PTTL", KEYS[1])
if value and string.sub(value, 1, #ARGV[2]) == ARGV[2] then
    redis.call("DEL", KEYS[1])
    redis.call("PUBLISH", ARGV[1], value)
end
return {value, pttl}
""")

Found = tuple[str | None, int]


def _found(reply: object) -> Found:
    value, pttl = reply if isinstance(reply, list) else (None, -2)
    return (value.decode(errors="replace") if isinstance(value, bytes) else None, int(pttl))


@dataclass(frozen=True, slots=True)
class MasterLock:
    """One master's answer: the lock's value and seconds to live there, or why it did not answer."""

    master: str  # the URL without its password
    value: str | None = None  # None: no key (or no answer)
    ttl: float | None = None  # seconds left; math.inf for a key without expiry; None: no key
    error: str | None = None  # why the master did not answer; None when it did

    @property
    def answered(self) -> bool:
        return self.error is None

    @property
    def token(self) -> int | None:
        """The token recorded in the value (None: no key, a lease without a source, or a foreign value)."""
        if self.value is None:
            return None
        try:
            return token_of(self.value)
        except ValueError:
            return None

    def __str__(self) -> str:
        if self.error is not None:
            return f"{self.master}: no answer: {self.error}"
        if self.value is None:
            return f"{self.master}: free"
        ttl = "no expiry" if self.ttl == math.inf else f"{self.ttl:.3f}s left"
        return f"{self.master}: token {_shown(self.token)}, {ttl}"


def _shown(token: int | None) -> str:
    return "-" if token is None else str(token)


def _answers(urls: Sequence[str], outcomes: Sequence[object], per_node: float) -> tuple[MasterLock, ...]:
    answers = []
    for url, outcome in zip(urls, outcomes, strict=True):
        if isinstance(outcome, tuple):
            value, pttl = outcome
            ttl = None if value is None else math.inf if pttl < 0 else pttl / 1000
            answers.append(MasterLock(display_url(url), value, ttl))
        else:
            answers.append(MasterLock(display_url(url), error=reason(outcome, per_node)))
    return tuple(answers)


@dataclass(frozen=True, slots=True)
class LockState:
    """A lock as every master saw it at one moment (`locker.inspect(resource)`)."""

    resource: str
    key: str
    quorum: int
    masters: tuple[MasterLock, ...]

    @property
    def value(self) -> str | None:
        """The value found on the most masters (None: no master holds one)."""
        counts = Counter(m.value for m in self.masters if m.value is not None)
        return counts.most_common(1)[0][0] if counts else None

    @property
    def holding(self) -> int:
        """How many masters hold `value`."""
        return sum(m.value is not None and m.value == self.value for m in self.masters)

    @property
    def answered(self) -> int:
        return sum(m.answered for m in self.masters)

    @property
    def held(self) -> bool | None:
        """True: one value sits on a quorum. False: no value can (too few hold one even if every master
        that did not answer held it). None: unknown, too many masters did not answer."""
        if self.holding >= self.quorum:
            return True
        if self.holding + len(self.masters) - self.answered < self.quorum:
            return False
        return None

    @property
    def token(self) -> int | None:
        """The holder's token, read from its value (None when not held, or held without a source)."""
        return next((m.token for m in self.masters if m.value is not None and m.value == self.value), None)

    @property
    def ttl(self) -> float | None:
        """Seconds until fewer than a quorum still hold the value: the quorum-th longest TTL among them."""
        if not self.held:
            return None
        ttls = sorted(
            (m.ttl for m in self.masters if m.value == self.value and m.ttl is not None), reverse=True
        )
        return ttls[self.quorum - 1]

    @property
    def unreachable(self) -> tuple[str, ...]:
        return tuple(m.master for m in self.masters if not m.answered)

    def __str__(self) -> str:
        if self.held:
            ttl = "no expiry" if self.ttl == math.inf else f"{self.ttl:.3f}s left"
            state = f"held by token {_shown(self.token)} on {self.holding} of {len(self.masters)} masters"
            state += f" (quorum {self.quorum}), {ttl}"
        elif self.held is False:
            state = f"free (quorum {self.quorum}"
            state += f"; a value on {self.holding} of {len(self.masters)})" if self.holding else ")"
        else:
            state = (
                f"unknown: {len(self.masters) - self.answered} of {len(self.masters)} masters did not answer "
                f"and {self.holding} hold a value (quorum {self.quorum})"
            )
        return f"{self.resource}: {state}"

    def __repr__(self) -> str:
        return f"<LockState {self}; " + "; ".join(map(str, self.masters)) + ">"


@dataclass(frozen=True, slots=True)
class ForcedUnlock:
    """What `force_unlock` deleted: each master's value and TTL as they were, or why it did not answer.

    `token`: the holder the call was limited to (None: any); a value of another token was kept.
    """

    resource: str
    key: str
    masters: tuple[MasterLock, ...]
    token: int | None = None

    def _deleted(self, master: MasterLock) -> bool:
        return master.value is not None and (self.token is None or master.token == self.token)

    @property
    def deleted(self) -> int:
        """On how many masters a key was deleted."""
        return sum(map(self._deleted, self.masters))

    @property
    def tokens(self) -> tuple[int, ...]:
        """The tokens whose keys were deleted, without repeats."""
        return tuple(dict.fromkeys(m.token for m in self.masters if m.token is not None and self._deleted(m)))

    @property
    def kept(self) -> tuple[str, ...]:
        """Masters that hold another token's value, left alone because `token` was given."""
        return tuple(m.master for m in self.masters if m.value is not None and not self._deleted(m))

    @property
    def unreachable(self) -> tuple[str, ...]:
        """Masters that did not answer: a key there stays until its TTL runs out."""
        return tuple(m.master for m in self.masters if not m.answered)

    def __str__(self) -> str:
        tokens = ", ".join(map(str, self.tokens)) or "-"
        text = f"{self.resource}: deleted on {self.deleted} of {len(self.masters)} masters (tokens: {tokens})"
        if self.kept:
            text += f"; kept on {len(self.kept)}: another holder's, not token {self.token}"
        if self.unreachable:
            text += f"; {len(self.unreachable)} did not answer"
        return text

    def __repr__(self) -> str:
        return f"<ForcedUnlock {self}; " + "; ".join(map(str, self.masters)) + ">"


async def _each(
    masters: Sequence[Master], command: Command[Found], per_node: float
) -> tuple[MasterLock, ...]:
    outcomes = await fan_out([m.send(command) for m in masters], per_node, shielded=True)
    return _answers([m.url for m in masters], outcomes, per_node)


async def inspect(
    masters: Sequence[Master], *, resource: str, key: str, quorum: int, per_node: float
) -> LockState:
    command = Command(INSPECT.evalsha(key), _found, INSPECT.eval(key))
    return LockState(resource, key, quorum, await _each(masters, command, per_node))


async def force_unlock(
    masters: Sequence[Master],
    *,
    resource: str,
    key: str,
    per_node: float,
    confirm: bool,
    token: int | None,
) -> ForcedUnlock:
    if confirm is not True:
        raise ConfigurationError(
            f"force_unlock({resource!r}) deletes the lock whoever holds it, and its holder may still be "
            "writing (only the fence stops it then): pass confirm=True if that is meant"
        )
    if token is not None and (isinstance(token, bool) or not isinstance(token, int)):
        raise ConfigurationError(f"token must be the holder's fencing token (an int) or None, got {token!r}")
    channel, holder = release_channel(key), "" if token is None else f"{token}:"
    command = Command(FORCE.evalsha(key, channel, holder), _found, FORCE.eval(key, channel, holder))
    return ForcedUnlock(resource, key, await _each(masters, command, per_node), token)
