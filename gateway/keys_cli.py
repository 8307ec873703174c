"""`fencegate keys add/list/revoke`: manage the gateway's API key file.

`add` generates a random secret, stores only its SHA-256 with the key's
name, prefixes and access, and prints the secret once: it cannot be shown
again, only revoked and replaced. A running gateway re-reads the file within
a second, so `revoke` takes effect without a restart. The file is replaced
atomically and kept at mode 0600.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.auth import (
    ACCESS,
    ApiKey,
    check_name,
    check_prefix,
    hash_secret,
    new_secret,
    read_keys,
    write_keys,
)
from gateway.errors import BadSetting
from gateway.settings_cli import env_name

ENV_FILE = env_name("api_keys")


def _add(path: Path, name: str, prefixes: list[str], read_only: bool) -> int:
    keys = read_keys(path)
    try:
        check_name(name)
        for prefix in prefixes:
            check_prefix(prefix)
    except ValueError as exc:
        raise BadSetting(str(exc)) from None
    if any(key.name == name for key in keys):
        raise BadSetting(f"a key named {name!r} exists; revoke it first or pick another name")
    secret = new_secret()
    access = frozenset({"read"}) if read_only else frozenset(ACCESS)
    keys.append(ApiKey(name=name, sha256=hash_secret(secret), prefixes=tuple(prefixes), access=access))
    write_keys(path, keys)
    print(secret)
    print(
        f"key {name!r} added to {path} ({', '.join(sorted(access))} on {prefixes}); the secret above is "
        "shown only now: send it as `Authorization: Bearer <secret>`",
        file=sys.stderr,
    )
    return 0


def _list(path: Path) -> int:
    if not path.exists():  # as `serve --api-keys` refuses it: a typo must not read as "no keys"
        raise BadSetting(f"API key file {path} does not exist; create it with `fencegate keys add`")
    keys = read_keys(path)
    if not keys:
        print(f"no keys in {path}", file=sys.stderr)
    for key in keys:
        prefixes = ",".join(repr(p) for p in key.prefixes)
        print(f"{key.name}\t{'+'.join(sorted(key.access))}\t{prefixes}\tsha256:{key.sha256[:12]}")
    return 0


def _revoke(path: Path, name: str) -> int:
    keys = read_keys(path)
    kept = [key for key in keys if key.name != name]
    if len(kept) == len(keys):
        raise BadSetting(f"no key named {name!r} in {path}; `fencegate keys list` shows the names")
    write_keys(path, kept)
    print(f"key {name!r} revoked", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    """`fencegate keys ACTION`; a missing or malformed key file raises `BadSetting`."""
    if args.file is None:
        raise BadSetting(f"give the key file with --file or ${ENV_FILE}")
    path = Path(args.file)
    if args.action == "add":
        return _add(path, args.name, args.prefix, args.read_only)
    if args.action == "list":
        return _list(path)
    return _revoke(path, args.name)
