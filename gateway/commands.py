"""The gateway's commands as the `fencegate` command line shows them: `serve`, `keys`, `audit`.

Only the options live here, so `fencegate serve --help` loads no server:
each command's `func` is a "module:function" the command line imports when
the command runs. A command raises the gateway's own errors (`ConfigurationError`
for a bad value); the command line turns them into one line and an exit code.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gateway.settings_cli import add_arguments, env_name

__all__ = ["audit", "keys", "serve", "upstream"]


def serve(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Serve the fenced object store over HTTP. Requests that change storage carry a Fencing-Token; "
        "tokens below a resource's high-water mark are refused (409). Every option is also an "
        "environment variable (--max-body is FENCEGATE_MAX_BODY); a flag wins. SIGTERM drains the "
        "requests in flight, then stops."
    )
    parser.epilog = (
        "examples:\n"
        "  fencegate serve --port 0 --data-dir /tmp/fencegate\n"
        "  fencegate serve --storage postgresql://fg@db/fg --host 0.0.0.0 --api-keys keys.json"
    )
    add_arguments(parser)
    parser.set_defaults(func="gateway.serve:run")


def keys(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Manage the API key file given to `fencegate serve --api-keys`. A secret is printed once, at "
        "`add`, and only its SHA-256 is stored; running gateways re-read the file within a second."
    )
    parser.epilog = (
        "examples:\n"
        "  fencegate keys add billing --prefix billing/ --file keys.json\n"
        "  fencegate keys list --file keys.json\n"
        "  fencegate keys revoke billing --file keys.json"
    )
    _key_file(parser, default=os.environ.get(env_name("api_keys")) or None)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="create a key and print its secret once")
    add.epilog = "example:\n  fencegate keys add reports --prefix reports/ --read-only --file keys.json"
    add.add_argument("name", help="the key's name, as logs and the audit trail show it")
    add.add_argument(
        "--prefix",
        action="append",
        required=True,
        help="a key, resource or list prefix the key may touch (repeat for several; '' allows all)",
    )
    add.add_argument("--read-only", action="store_true", help="no writes and no fenced reads")
    listing = actions.add_parser("list", help="names, prefixes and access of the stored keys (never secrets)")
    listing.epilog = "example:\n  fencegate keys list --file keys.json"
    revoke = actions.add_parser("revoke", help="remove a key; running gateways drop it within a second")
    revoke.epilog = "example:\n  fencegate keys revoke billing --file keys.json"
    revoke.add_argument("name", help="the key to remove")
    for action in (add, listing, revoke):
        _key_file(action, default=argparse.SUPPRESS)  # also after the action, where users write it
    parser.set_defaults(func="gateway.keys_cli:run")


def _key_file(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    parser.add_argument(
        "--file",
        default=default,
        metavar="PATH",
        help=f"the key file (default: ${env_name('api_keys')}, the variable `serve` reads too)",
    )


def _batch(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 100_000):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number from 1 to 100000")
    return int(text)


def audit(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read the audit trail of a gateway's database and check it; the gateway need not run."
    )
    parser.epilog = "example:\n  fencegate audit verify --storage sqlite:///.state/gateway/fencegate.db"
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    verify = actions.add_parser(
        "verify",
        help="check the trail's hash chain and that accepted tokens never went back; print what was read",
        description="Print what the trail holds, its chain head, and whether it was tampered with (the first "
        "entry that was changed, removed or inserted out of order) or accepted tokens ever went back per "
        "resource: exit 0 when neither, 1 when either.",
    )
    verify.epilog = (
        parser.epilog + "\n  fencegate audit verify --storage URL --head 3f0c...e91a@12000"
        "\n(--head: a chain head the gateway logged or verify printed earlier; a truncated tail shows)"
    )
    verify.add_argument(
        "--head",
        action="append",
        default=[],
        metavar="HASH@ID",
        help="an exported chain head that must still be in the trail; repeatable (default: none)",
    )
    verify.add_argument(
        "--archive",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="an archive `audit archive` wrote, checked before the live trail; repeatable (default: none)",
    )
    verify.add_argument(
        "--json", action="store_true", help="print the report as one JSON object (exit codes unchanged)"
    )
    archive = actions.add_parser(
        "archive",
        help="move the entries before a cutoff to a compressed file, checked, then delete them",
        description="Write the trail's entries before --before (an entry id, or a time) to --to (gzip JSON "
        "lines ending on their chain head), read the file back and check it against the database, and only "
        "then delete those entries, in batches. A crash at any step loses no entry; run it again with the "
        "same --to to finish. A target that cannot be written stops it before anything is deleted.",
    )
    archive.epilog = (
        "examples:\n  fencegate audit archive --storage URL --before 500000 --to audit-1.jsonl.gz"
        "\n  fencegate audit archive --storage URL --before 2026-11-01T00:00:00Z --to audit-2.jsonl.gz"
        "\n  fencegate audit verify --storage URL --archive audit-1.jsonl.gz --archive audit-2.jsonl.gz"
    )
    archive.add_argument(
        "--before",
        required=True,
        metavar="ID|TIME",
        help="archive the entries with an id below ID, or written before TIME (ISO 8601, e.g. "
        "2026-11-01T00:00:00Z; without an offset, UTC)",
    )
    archive.add_argument("--to", required=True, type=Path, metavar="FILE", help="the archive to write")
    archive.add_argument(
        "--batch",
        type=_batch,
        default=5_000,
        metavar="N",
        help="entries deleted per transaction, 1..100000: each holds the trail's delete that long "
        "(default: 5000)",
    )
    archive.add_argument("--json", action="store_true", help="print what was done as one JSON object")
    where = f"the gateway's storage, sqlite:///PATH or postgresql://... (default: ${env_name('storage')})"
    for action in (verify, archive):
        action.add_argument(
            "--storage", default=os.environ.get(env_name("storage")) or None, metavar="URL", help=where
        )
    parser.set_defaults(func="gateway.audit_cli:run")


def upstream(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check an upstream store before a gateway relies on it. `check` runs the probe `serve` runs at "
        "start on a scratch key of its own: a create with If-None-Match: *, the metadata given back, "
        "If-None-Match: * and a stale If-Match refused, exactly one of 32 concurrent PUTs on one ETag, "
        "a delete on a stale ETag refused. For an s3:// URL, credentials and region come from the AWS "
        "environment and config files; an http(s) URL is probed as --upstream-ordering conditional uses "
        "it (strong ETags, RFC 9110 preconditions), its versions recorded in a scratch database. Exit 0 "
        "when every check passed, 1 when one failed."
    )
    parser.epilog = "example:\n  fencegate upstream check s3://my-bucket/fenced/ --upstream-endpoint http://127.0.0.1:8333"
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check", help="probe an s3:// or http(s) upstream's conditional writes; print every check"
    )
    check.epilog = parser.epilog
    check.add_argument(
        "url", metavar="URL", help="the upstream: s3://BUCKET[/PREFIX] or http(s)://HOST[:PORT][/PATH]"
    )
    check.add_argument(
        "--upstream-endpoint",
        default=os.environ.get(env_name("upstream_endpoint")) or None,
        metavar="URL",
        help=f"the S3 endpoint of a non-AWS store (default: ${env_name('upstream_endpoint')}, else AWS's)",
    )
    check.add_argument(
        "--upstream-timeout",
        default=os.environ.get(env_name("upstream_timeout")) or "10.0",
        metavar="SECONDS",
        help="seconds each request to the store may take "
        f"(default: ${env_name('upstream_timeout')}, else 10.0)",
    )
    check.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    parser.set_defaults(func="gateway.upstream_cli:run")
