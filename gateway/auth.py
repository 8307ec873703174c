"""API keys: stored hashed, each scoped to name prefixes and to read or write.

The key file is JSON: `{"keys": [{"name": "billing", "sha256": "<hex of the
secret>", "prefixes": ["billing/"], "access": ["read", "write"]}]}`
(`access` defaults to both). `fencegate keys add` writes entries and prints
the secret once; the file never holds a usable secret. A file larger than
`MAX_KEY_FILE` (16 MiB) is refused as a malformed one is. A client sends
`Authorization: Bearer <secret>`; the gateway hashes it and compares the hash
with every stored hash in constant time (`hmac.compare_digest`, no early
exit), so neither the answer's timing nor its content says how close a guess
came. Without a key file the gateway runs open: allowed on loopback (and said
loudly at start), refused elsewhere unless the operator passes
`--allow-open` or requires client certificates (`--tls-client-ca`).

With mutual TLS a request without `Authorization` is the entry named by its
client certificate's subject CN (`gateway.tls`); a request that sends a
bearer key is that key's entry alone, so a wrong key is 401 whatever the
certificate. `Authorization` holds one credential: a comma makes it a list
(RFC 9110 joins repeated fields with commas, and no bearer secret holds
one), which is 400 as two `Authorization` headers are, never a 401 that
reads as "wrong key" (docs/security.md, "One value per header").

A prefix is literal: only `''` is every name. One holding a character no key
or resource name can hold (`*`, a space) matches nothing, so it is refused
with the fix, by `fencegate keys add` and in a key file, rather than read as a
wildcard it is not.

"write" is needed by everything that can move a mark: PUT, DELETE and a
fenced GET. "read" covers plain reads, listing and `/v1/fences`.

`client_middleware` (`gateway.clients`) turns a request's credentials into
`Credentials`: the key they name, or why they name none. The view asks it
(`Credentials.authorize`) once it has read what the request names, so a
malformed request is 400 whatever its credentials, and nothing costly (the
body, the store) is touched for a caller without access.

The prefixes also bound what a key sees: an answer names a resource only if
`Credentials.shown` lets it (`gateway.views`, `gateway.middlewares`), so the resource a key in scope belongs
to stays unnamed when it lies outside (docs/security.md, "What a key sees").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gateway.errors import BadSetting, MalformedRequest, NotAuthenticated, OutOfScope, Refusal
from lockclient.wire import KEY_PATTERN
from storage.models import MAX_CLIENT_LENGTH

Access = Literal["read", "write"]
ACCESS: tuple[Access, ...] = ("read", "write")
SECRET_BYTES = 32  # 256 bits of randomness per generated key
# A key's name is its client, `key:<name>`, in the audit trail and idempotency records, whose columns
# hold MAX_CLIENT_LENGTH characters: PostgreSQL refuses a longer one, and every write would be 503.
MAX_NAME_LENGTH = MAX_CLIENT_LENGTH - len("key:")
# Compared against when no key is stored, to keep the work constant; no secret hashes to it
# (empty secrets are refused before hashing).
_NOBODY = hashlib.sha256(b"").hexdigest()
# What a key or resource name may hold, the slash between segments included: read off the pattern every
# name is checked against (`gateway.parsing`), so a prefix check and the names never drift apart.
NAME_CHARACTERS = frozenset(c for c in map(chr, range(0x20, 0x7F)) if re.fullmatch(KEY_PATTERN, f"a{c}a"))
# The largest key file read: it is parsed whole at start and on every change. An entry as `fencegate keys`
# writes it is about 235 bytes, so this holds some 70,000 keys; a larger file is a mistake (a wrong path,
# a runaway script), not keys.
MAX_KEY_FILE = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One client's key: its name (in logs and the audit trail), scopes and access."""

    name: str
    sha256: str
    prefixes: tuple[str, ...]
    access: frozenset[str] = frozenset(ACCESS)

    def allows(self, name: str) -> bool:
        return any(name.startswith(prefix) for prefix in self.prefixes)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "prefixes": list(self.prefixes),
            "access": sorted(self.access),
        }


def hash_secret(secret: str) -> str:
    """What the key file stores for `secret`."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """A fresh random secret, as `fencegate keys add` prints it."""
    return "fg_" + secrets.token_urlsafe(SECRET_BYTES)


def check_name(name: object) -> str:
    """`name` if it can name a key in logs and the audit trail; ValueError otherwise."""
    if not isinstance(name, str) or not name.strip() or not name.isprintable() or len(name) > MAX_NAME_LENGTH:
        raise ValueError(
            f"key name {name!r}: give a name the logs and the audit trail can show, at most "
            f"{MAX_NAME_LENGTH} printable characters, e.g. billing-worker"
        )
    return name


def check_prefix(prefix: str) -> str:
    """`prefix` if some name can start with it; ValueError otherwise (a `*` is no wildcard: it matches
    nothing, and a user who wrote it believes the key covers everything)."""
    odd = sorted(set(prefix) - NAME_CHARACTERS)
    if odd:
        raise ValueError(
            f"prefix {prefix!r} holds {''.join(odd)!r}, which no key or resource name can hold, so it "
            "would match nothing: prefixes are literal (no wildcards); use '' for every resource, or the "
            "start of the names, e.g. billing/"
        )
    return prefix


def _strings(entry: dict[str, object], field: str, default: object = None) -> tuple[str, ...]:
    """A list of strings; `str()` of anything else would widen a scope (a string is a list of letters)."""
    value = entry.get(field, default)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"key {entry.get('name')!r}: {field} must be a list of strings, not {value!r}")
    return tuple(value)


def _parse(entry: object) -> ApiKey:
    if not isinstance(entry, dict):
        raise TypeError(f"each key must be an object, not {entry!r}")
    name = check_name(entry.get("name"))
    access = frozenset(_strings(entry, "access", list(ACCESS)))
    unknown = access - set(ACCESS)
    if unknown or not access:
        raise ValueError(f"key {name!r}: access must be a non-empty subset of {list(ACCESS)}")
    digest = entry.get("sha256")
    if (
        not isinstance(digest, str)
        or len(digest) != 64
        or any(c not in "0123456789abcdef" for c in digest.lower())
    ):
        raise ValueError(f"key {name!r}: sha256 must be 64 hex digits")
    prefixes = _strings(entry, "prefixes")
    for prefix in prefixes:
        try:
            check_prefix(prefix)
        except ValueError as exc:
            raise ValueError(f"key {name!r}: {exc}") from None
    return ApiKey(name=name, sha256=digest.lower(), prefixes=prefixes, access=access)


def _unique(keys: list[ApiKey]) -> list[ApiKey]:
    """`keys`, if no two share a name (a certificate's CN names one entry) or a hash (one secret, one
    scope); ValueError otherwise: either way the entry that applied would depend on the order."""
    for field in ("name", "sha256"):
        seen: set[str] = set()
        for key in keys:
            value = getattr(key, field)
            if value in seen:
                raise ValueError(f"two keys have the {field} {value!r}; each key needs its own")
            seen.add(value)
    return keys


def _read_bounded(path: Path) -> bytes:
    """The key file's bytes, at most MAX_KEY_FILE; a larger file is refused. One read of up to one byte
    more decides, not a stat first: the file may be replaced between a stat and a read."""
    with path.open("rb") as file:
        data = file.read(MAX_KEY_FILE + 1)
        if len(data) > MAX_KEY_FILE:
            size = max(os.fstat(file.fileno()).st_size, len(data))  # for the message only
            raise BadSetting(
                f"cannot read API keys from {path}: it holds {size} bytes, more than the {MAX_KEY_FILE} "
                f"({MAX_KEY_FILE // 2**20} MiB) a key file may hold; check that the path names the key "
                "file, or delete unused entries from it by hand (`fencegate keys` refuses it too)"
            )
    return data


def read_keys(path: Path) -> list[ApiKey]:
    """The keys stored in `path`; a missing file holds none."""
    try:
        document = json.loads(_read_bounded(path).decode())
        return _unique([_parse(entry) for entry in document["keys"]])
    except FileNotFoundError:
        return []
    except OSError as exc:  # the path, not the file's content, is wrong: no format hint
        raise BadSetting(f"cannot read API keys from {path}: {exc.strerror}") from exc
    except BadSetting:  # too large: the message already says the fix
        raise
    except RecursionError as exc:  # JSON nested past the parser's depth: a running gateway must keep going
        raise BadSetting(f"cannot read API keys from {path}: nested too deeply to be a key file") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise BadSetting(
            f"cannot read API keys from {path}: {exc}; expected "
            '{"keys": [{"name": ..., "sha256": ..., "prefixes": [...], "access": ["read", "write"]}]}'
        ) from exc


def write_keys(path: Path, keys: Iterable[ApiKey]) -> None:
    """Replace the key file atomically (a gateway reloading it never sees half a file), mode 0600; a path
    that cannot be written raises `BadSetting` and leaves the old file as it was."""
    text = json.dumps({"keys": [key.to_json() for key in keys]}, indent=2) + "\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)  # a refused write leaves nothing behind
            raise
    except OSError as exc:
        raise BadSetting(
            f"cannot write API keys to {path}: {exc.strerror}; give a file in a directory you can write"
        ) from exc


class ApiKeys:
    """The configured keys; `identify` finds the one behind a bearer secret.

    Loaded from a file, they follow it: `refresh()` (called every second by
    the gateway) re-reads the file when it changed, so `fencegate keys revoke`
    takes effect on a running gateway without a restart. A file that cannot
    be read keeps the previous keys (and is logged by the caller).
    """

    def __init__(self, keys: Iterable[ApiKey], *, path: Path | None = None) -> None:
        self._keys = tuple(keys)
        self._by_name = {key.name: key for key in self._keys}
        self._path = path
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        if self._path is None:
            return None
        try:
            info = self._path.stat()
        except OSError:
            return None
        return info.st_mtime_ns, info.st_ino

    @classmethod
    def load(cls, path: Path) -> ApiKeys:
        if not path.exists():
            raise BadSetting(f"API key file {path} does not exist; create it with `fencegate keys add`")
        return cls(read_keys(path), path=path)

    def refresh(self) -> bool:
        """Re-read the key file if it changed since the last read; True if the keys were replaced."""
        stamp = self._stat()
        if self._path is None or stamp is None or stamp == self._stamp:
            return False
        keys = read_keys(self._path)
        self._keys, self._stamp = tuple(keys), stamp
        self._by_name = {key.name: key for key in self._keys}
        return True

    def __len__(self) -> int:
        return len(self._keys)

    def identify(self, authorization: str | None) -> ApiKey:
        """The key behind an `Authorization: Bearer` header; 400 if it is a list, 401 otherwise."""
        if "," in (authorization or ""):  # two credentials joined, as a proxy may join two headers
            raise MalformedRequest(
                "Authorization holds a comma, so it is a list of credentials; send exactly one, "
                "`Authorization: Bearer <key>`, once (a proxy in front may read another element of it "
                "than the gateway does)"
            )
        scheme, _, secret = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not secret.strip() or not secret.isascii():
            raise NotAuthenticated("send the API key as `Authorization: Bearer <key>`")
        presented = hash_secret(secret.strip()).encode()
        found: ApiKey | None = None
        for key in self._keys or (ApiKey(name="", sha256=_NOBODY, prefixes=()),):
            if hmac.compare_digest(presented, key.sha256.encode()):
                found = key
        if found is None:
            raise NotAuthenticated("unknown API key; ask the operator for a key scoped to your resources")
        return found

    def named(self, name: str) -> ApiKey | None:
        """The entry called `name`: a client certificate's subject CN names its client's entry."""
        return self._by_name.get(name)

    @staticmethod
    def require(key: ApiKey, *names: str, access: Access) -> None:
        """403 unless the key has `access` and every name (resource, key, prefix) is under its prefixes."""
        if access not in key.access:
            raise OutOfScope(
                f"API key {key.name!r} may not {access} (it has {sorted(key.access)}); a write or a fenced "
                "read needs a key with write access",
                fields={"access": access},
            )
        for name in names:
            if not key.allows(name):
                raise OutOfScope(
                    f"API key {key.name!r} is not allowed on {name!r}; its prefixes are {list(key.prefixes)}",
                    fields={"name": name},
                )


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a request's credentials came to: the key they name, or the refusal that says why none.

    `open`: the gateway has no keys, and every request may do anything. A request with two
    `Authorization` headers names no key, even when the first would: it carries its 400.
    """

    key: ApiKey | None = None
    refusal: Refusal | None = None
    open: bool = False

    def authorize(self, *names: str, access: Access) -> None:
        """Nothing on an open gateway; else the refusal, or 403 unless the key has `access` on every
        name (resource, key, prefix)."""
        if self.open:
            return
        if self.refusal is not None:
            raise self.refusal
        if self.key is None:  # no refusal was found for it: still no access
            raise NotAuthenticated("send the API key as `Authorization: Bearer <key>`")
        ApiKeys.require(self.key, *names, access=access)

    def shown(self, name: str) -> str | None:
        """`name` if the caller may see it: its key's scope covers it (as if the caller had named it
        itself), or the gateway is open; else None."""
        if self.open or (self.key is not None and self.key.allows(name)):
            return name
        return None


OPEN = Credentials(open=True)
