"""The audit archive file: gzip-compressed JSON lines, a header, the entries, and a trailer.

    {"format": "fencegate-audit-archive/1", "first_id": 1, "last_id": 9000}
    {"id": 1, "at": 1764640000123456, "client": ..., "outcome": "accepted", "chain": "3f0c..."}
    ...
    {"end": "HASH@9000", "entries": 9000}

An entry holds every hashed field (`chain.HASHED`, `at` in microseconds
since the epoch, as the hash encodes it) and its stored hash, so the chain
can be checked from the file alone and across files. The trailer names the
chain head the archive ends on; a file without it (cut short) is no archive.
`write_archive` writes beside the target and renames it into place after an
fsync, so the target is either whole or absent, never half written.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import itertools
import json
import os
from collections.abc import AsyncIterable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

from storage.chain import HASHED, Head
from storage.errors import BadArchive

FORMAT = "fencegate-audit-archive/1"
# zlib's default, not gzip's 9: level 9 took a third of the worker thread's time (and so of the GIL it
# shares with the gateway's loop) for a file a few percent smaller
COMPRESS_LEVEL = 6
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ArchiveInfo:
    """What an archive holds: its id range and the chain head it ends on."""

    path: Path
    first_id: int
    last_id: int
    end: Head


def partial_of(path: Path) -> Path:
    """Where an archive is written before it is renamed into place."""
    return path.with_name(path.name + ".partial")


def _record(row: Mapping[Any, Any]) -> dict[str, Any]:
    at: datetime = row["at"]
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    record = {name: row[name] for name in HASHED}
    record["at"] = (aware - _EPOCH) // timedelta(microseconds=1)
    record["chain"] = row["chain"]
    return record


def _entry(record: dict[str, Any]) -> dict[str, Any]:
    record["at"] = _EPOCH + timedelta(microseconds=int(record["at"]))
    return record


Progress = Callable[[int], None]  # entries written or read so far; called in the worker thread


def _open(partial: Path) -> tuple[BinaryIO, gzip.GzipFile]:
    raw = partial.open("wb")
    return raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=COMPRESS_LEVEL, mtime=0)


def _write_page(
    out: gzip.GzipFile, page: Sequence[Mapping[Any, Any]], progress: Progress, count: int
) -> None:
    """In the worker thread: the page encoded, compressed and written, then `progress` told."""
    out.write(b"".join(_line(_record(row)) for row in page))
    progress(count)


def _seal(raw: BinaryIO, out: gzip.GzipFile, trailer: Mapping[str, Any]) -> None:
    """The trailer, then the partial file on disk (fsync), and closed."""
    with raw, out:
        out.write(_line(trailer))
        out.flush()
        raw.flush()
        os.fsync(raw.fileno())


def _rename(partial: Path, path: Path) -> None:
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _abandon(partial: Path, raw: BinaryIO, out: gzip.GzipFile) -> None:
    with contextlib.suppress(OSError):
        out.close()
    with contextlib.suppress(OSError):
        raw.close()
    partial.unlink(missing_ok=True)


async def write_archive(
    path: Path,
    pages: AsyncIterable[Sequence[Mapping[Any, Any]]],
    *,
    first_id: int,
    last_id: int,
    written: Callable[[], None] = lambda: None,
    progress: Progress = lambda _count: None,
) -> ArchiveInfo:
    """Write `pages` (entries `first_id`..`last_id`, in id order) as the archive `path`; `BadArchive` if
    it cannot be written (nothing else happened then). Durable when it returns; `written` is called
    between the fsync of the partial file and its rename. The encoding, compression, writes and fsyncs
    run in a worker thread, a page at a time, so the event loop serves requests meanwhile."""
    partial = partial_of(path)
    try:
        raw, out = await asyncio.to_thread(_open, partial)
    except OSError as exc:
        raise BadArchive(f"archive {path} cannot be written: {exc.strerror}") from exc
    count, end = 0, None
    try:
        await asyncio.to_thread(
            out.write, _line({"format": FORMAT, "first_id": first_id, "last_id": last_id})
        )
        async for page in pages:
            if not page:
                continue
            count, end = count + len(page), Head(int(page[-1]["id"]), str(page[-1]["chain"]))
            await asyncio.to_thread(_write_page, out, page, progress, count)
        if end is None or end.last_id != last_id:
            raise BadArchive(f"archive {path}: the trail changed while it was read; run it again")
        await asyncio.to_thread(_seal, raw, out, {"end": str(end), "entries": count})
        written()
        await asyncio.to_thread(_rename, partial, path)
    except OSError as exc:
        await asyncio.to_thread(_abandon, partial, raw, out)
        raise BadArchive(f"archive {path} cannot be written: {exc.strerror}") from exc
    except BaseException:
        await asyncio.shield(asyncio.to_thread(_abandon, partial, raw, out))
        raise
    return ArchiveInfo(path, first_id, last_id, end)


def _line(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def read_info(path: Path) -> ArchiveInfo:
    """The header and trailer of the archive `path`, every line read; `BadArchive` if it is not whole."""
    first_id = last_id = None
    end: Head | None = None
    for record in _records(path):
        if first_id is None:
            first_id, last_id = record["first_id"], record["last_id"]
        elif "end" in record:
            end = Head.parse(record["end"])
    if first_id is None or last_id is None or end is None or end.last_id != last_id:
        raise BadArchive(f"archive {path} is not whole: it has no trailer (cut short)")
    return ArchiveInfo(path, int(first_id), int(last_id), end)


def read_entries(path: Path) -> Iterator[dict[str, Any]]:
    """The entries of the archive `path`, in order, `at` as a time; `BadArchive` if it is not whole."""
    records = _records(path)
    next(records, None)  # the header
    ended = False
    for record in records:
        if "end" in record:
            ended = True
            break
        yield _entry(record)
    if not ended:
        raise BadArchive(f"archive {path} is not whole: it has no trailer (cut short)")


def read_pages(path: Path, size: int) -> Iterator[list[dict[str, Any]]]:
    """`read_entries` in lists of up to `size`: each `next` is one worker-thread call's worth."""
    entries = read_entries(path)
    while page := list(itertools.islice(entries, size)):
        yield page


def _records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with gzip.open(path, "rb") as lines:
            for number, line in enumerate(lines, 1):
                record = json.loads(line)
                if not isinstance(record, dict) or (number == 1 and record.get("format") != FORMAT):
                    raise BadArchive(f"{path} is not a fencegate audit archive (line {number})")
                yield record
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, BadArchive):
            raise
        reason = "not a whole gzip of JSON lines"
        if isinstance(exc, OSError) and exc.strerror:
            reason = exc.strerror
        raise BadArchive(f"archive {path} cannot be read: {reason}") from exc
