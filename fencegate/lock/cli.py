"""`fencegate lock inspect|force-unlock`: a lock's state on the masters, and the operator's way to free it.

Both speak to the masters as `Redlock` does (the same URLs, `rediss://` and
its `ssl_*` parameters included). An answer that a quorum of masters did not
give is not an answer: the state (or what was deleted) is printed, then
`QuorumUnavailable` ends the command with one line and exit code 3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import Sequence

from lockclient.config import DEFAULT_KEY_PREFIX, DEFAULT_TTL
from lockclient.errors import ConfigurationError, QuorumUnavailable
from lockclient.redlock import Redlock
from lockclient.state import ForcedUnlock, LockState, MasterLock

__all__ = ["configure"]

# An operator's tool may cross a slow network: a master is "not answering" only after this long,
# not after the lock's 50 ms, which is tuned for the hot path.
CLI_NODE_TIMEOUT = 1.0
EXAMPLE_MASTERS = "redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379"


def _token(text: str) -> int:
    """A fencing token as a holder is given one: a whole number from 1 (no source hands out 0 or less, so
    such a `--token` could only match no holder and read as "held by another")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{value}: a fencing token is 1 or more; give the one `inspect` shows"
        )
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Look at a lock on the Redis masters (held? by which token? for how long on each master?) or, as "
        "an operator, delete it whoever holds it. A forced unlock does not stop the old holder: only the "
        "fence (its token) does."
    )
    parser.epilog = (
        "examples:\n"
        f"  fencegate lock inspect --masters {EXAMPLE_MASTERS} invoices\n"
        f"  fencegate lock force-unlock --masters {EXAMPLE_MASTERS} --yes --token 41 invoices --json"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    inspect = actions.add_parser(
        "inspect",
        help="print whether RESOURCE is held, by which token, and each master's answer and TTL",
        description="Read RESOURCE's lock key on every master at once. Held: one value on a quorum; "
        "free: no value can be; unknown (exit 3): too many masters did not answer to tell.",
    )
    inspect.epilog = f"example:\n  fencegate lock inspect --masters {EXAMPLE_MASTERS} invoices --json"
    _common(inspect)
    inspect.set_defaults(func=_inspect)

    force = actions.add_parser(
        "force-unlock",
        help="delete RESOURCE's lock on every master that answers, whoever holds it (needs --yes)",
        description="Delete RESOURCE's lock key on every master that answers and wake its waiters. The "
        "holder is not told: its writes are refused by the fence once a newer token has written. The "
        "holder's later release or renewal cannot touch a new holder's lock. Exit 3 if fewer than a quorum "
        "answered: the lock may still be held.",
    )
    force.epilog = f"example:\n  fencegate lock force-unlock --masters {EXAMPLE_MASTERS} --yes invoices"
    force.add_argument(
        "--yes", action="store_true", help="confirm: delete the lock whoever holds it (refused without)"
    )
    force.add_argument(
        "--token",
        type=_token,
        metavar="N",
        help="delete only the lock of the holder with this token, 1 or more (as `inspect` showed it); a "
        "newer holder's is kept and the exit code is 1 (default: any holder)",
    )
    _common(force)
    force.set_defaults(func=_force_unlock)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("resource", metavar="RESOURCE", help="the lock's name, as given to locker.lock()")
    parser.add_argument(
        "--masters",
        required=True,
        action="append",
        metavar="URLS",
        help="the Redlock masters, comma-separated (or the option repeated): redis://, rediss:// (with "
        "?ssl_ca_certs=... as for Redlock), unix://",
    )
    parser.add_argument(
        "--key-prefix",
        default=DEFAULT_KEY_PREFIX,
        metavar="PREFIX",
        help="the Redlock's key_prefix: the key is PREFIX+RESOURCE",
    )
    parser.add_argument(
        "--node-timeout",
        type=float,
        default=CLI_NODE_TIMEOUT,
        metavar="SECONDS",
        help="how long each master may take to answer before it counts as not answering",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of lines")


def _masters(given: Sequence[str]) -> list[str]:
    return [url.strip() for item in given for url in item.split(",") if url.strip()]


def _locker(args: argparse.Namespace) -> Redlock[None]:
    # The masters are asked as a Redlock with the default TTL asks them, and a node timeout must stay
    # below that TTL; this command has no TTL option, so the bound is said in terms of --node-timeout.
    if not (math.isfinite(args.node_timeout) and 0 < args.node_timeout < DEFAULT_TTL):
        raise ConfigurationError(
            f"--node-timeout {args.node_timeout:g}: give a number of seconds above 0 and below "
            f"{DEFAULT_TTL:g}, e.g. {CLI_NODE_TIMEOUT:g}"
        )
    return Redlock(_masters(args.masters), node_timeout=args.node_timeout, key_prefix=args.key_prefix)


def _inspect(args: argparse.Namespace) -> int:
    return asyncio.run(_inspect_async(args))


async def _inspect_async(args: argparse.Namespace) -> int:
    async with _locker(args) as locker:
        state = await locker.inspect(args.resource)
    _print(args.json, _state_json(state), [str(state), *(f"  {m}" for m in state.masters)])
    if state.held is None:
        raise _unavailable(state.resource, state.masters, f"cannot tell whether {state.resource!r} is held")
    return 0


def _force_unlock(args: argparse.Namespace) -> int:
    if not args.yes:
        raise ConfigurationError(
            f"force-unlock deletes the lock on {args.resource!r} whoever holds it, and its holder may still "
            "be writing (only the fence stops it then): add --yes if that is meant"
        )
    return asyncio.run(_force_unlock_async(args))


async def _force_unlock_async(args: argparse.Namespace) -> int:
    async with _locker(args) as locker:
        forced = await locker.force_unlock(args.resource, confirm=True, token=args.token)
        quorum = locker.quorum
    _print(args.json, _forced_json(forced), [str(forced), *(f"  {m}" for m in forced.masters)])
    if len(forced.masters) - len(forced.unreachable) < quorum:
        raise _unavailable(forced.resource, forced.masters, f"{forced.resource!r} may still be locked")
    if forced.kept:
        print(
            f"{args.prog}: {forced.resource!r} is held by another holder than token {forced.token} on "
            f"{len(forced.kept)} master(s), whose lock was kept; run `inspect` again",
            file=sys.stderr,
        )
        return 1
    return 0


def _unavailable(resource: str, masters: Sequence[MasterLock], what: str) -> QuorumUnavailable:
    down = [m for m in masters if not m.answered]
    return QuorumUnavailable(
        f"{what}: {len(down)} of {len(masters)} masters did not answer ({', '.join(m.master for m in down)}; "
        f"e.g. {down[0].error}); start them or fix the network to them, or raise --node-timeout, and run "
        "this again",
        resource=resource,
        unreachable=[m.master for m in down],
        reasons={m.master: m.error or "ok" for m in masters},
    )


def _print(as_json: bool, document: dict[str, object], lines: list[str]) -> None:
    print(json.dumps(document, indent=2) if as_json else "\n".join(lines), file=sys.stdout)


def _seconds(ttl: float | None) -> float | None:
    """A TTL for JSON: None for no key and for a key without expiry (its value says which)."""
    return None if ttl is None or ttl == math.inf else round(ttl, 3)


def _master_json(master: MasterLock) -> dict[str, object]:
    return {
        "master": master.master,
        "answered": master.answered,
        "error": master.error,
        "locked": master.value is not None,
        "token": master.token,
        "ttl_s": _seconds(master.ttl),
    }


def _state_json(state: LockState) -> dict[str, object]:
    return {
        "resource": state.resource,
        "key": state.key,
        "held": state.held,
        "token": state.token,
        "holding": state.holding,
        "quorum": state.quorum,
        "ttl_s": _seconds(state.ttl),
        # holder: this master holds the value found on the most masters (the holder's, when held)
        "masters": [
            _master_json(m) | {"holder": m.value is not None and m.value == state.value}
            for m in state.masters
        ],
    }


def _forced_json(forced: ForcedUnlock) -> dict[str, object]:
    return {
        "resource": forced.resource,
        "key": forced.key,
        "token": forced.token,
        "deleted": forced.deleted,
        "tokens": list(forced.tokens),
        "kept": list(forced.kept),
        "unreachable": list(forced.unreachable),
        "masters": [_master_json(m) for m in forced.masters],
    }
