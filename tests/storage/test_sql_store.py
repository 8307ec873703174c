"""The fenced store on SQLite and on PostgreSQL: the fence decides in one transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from storage import BelowMark, ObjectNotFound, SqlObjectStore
from storage.fenced import digest_of

Names = Callable[[str], str]


async def test_put_then_get_returns_bytes_token_and_version(store: SqlObjectStore, names: Names) -> None:
    key = names("a")
    first = await store.put(key, b"one", resource=key, token=5)
    second = await store.put(key, b"two", resource=key, token=5)
    got = await store.get(key, resource=key, token=None)
    assert (first.created, first.version, second.created, second.version) == (True, 1, False, 2)
    assert (got.data, got.meta.token, got.meta.version, got.meta.size) == (b"two", 5, 2, 3)
    assert got.meta.digest == digest_of(b"two")


async def test_stale_put_raises_with_mark_and_changes_nothing(store: SqlObjectStore, names: Names) -> None:
    key = names("b")
    await store.put(key, b"newer", resource=key, token=34)
    with pytest.raises(BelowMark) as caught:
        await store.put(key, b"older", resource=key, token=33)
    assert (caught.value.resource, caught.value.token, caught.value.highest) == (key, 33, 34)
    got = await store.get(key, resource=key, token=None)
    assert (got.data, got.meta.token, got.meta.version) == (b"newer", 34, 1)
    assert await store.mark(key) == 34


async def test_equal_token_is_accepted(store: SqlObjectStore, names: Names) -> None:
    key = names("c")
    await store.put(key, b"1", resource=key, token=7)
    meta = await store.put(key, b"2", resource=key, token=7)
    assert (meta.token, meta.version) == (7, 2)


async def test_one_resource_fences_many_keys(store: SqlObjectStore, names: Names) -> None:
    resource, k1, k2 = names("lock"), names("k1"), names("k2")
    await store.put(k1, b"x", resource=resource, token=10)
    with pytest.raises(BelowMark):
        await store.put(k2, b"y", resource=resource, token=9)
    with pytest.raises(ObjectNotFound):
        await store.get(k2, resource=resource, token=None)
    assert await store.mark(resource) == 10
    assert await store.mark(k1) == 0


async def test_fenced_get_raises_the_mark_even_for_a_missing_key(store: SqlObjectStore, names: Names) -> None:
    key = names("d")
    with pytest.raises(ObjectNotFound):
        await store.get(key, resource=key, token=40)
    assert await store.mark(key) == 40
    with pytest.raises(BelowMark):
        await store.put(key, b"late", resource=key, token=39)


async def test_stale_fenced_get_is_refused(store: SqlObjectStore, names: Names) -> None:
    key = names("e")
    await store.put(key, b"v", resource=key, token=3)
    with pytest.raises(BelowMark):
        await store.get(key, resource=key, token=2)


async def test_delete_is_fenced(store: SqlObjectStore, names: Names) -> None:
    key = names("f")
    await store.put(key, b"v", resource=key, token=3)
    with pytest.raises(BelowMark):
        await store.delete(key, resource=key, token=2)
    assert (await store.get(key, resource=key, token=None)).data == b"v"
    meta = await store.delete(key, resource=key, token=4)
    assert (meta.token, meta.version) == (4, 1)
    with pytest.raises(ObjectNotFound):
        await store.delete(key, resource=key, token=4)
    assert await store.mark(key) == 4


async def test_list_by_prefix_is_ordered_and_paged(store: SqlObjectStore, names: Names) -> None:
    keys = [names(f"list/{i}") for i in range(5)]
    for key in keys:
        await store.put(key, b"v", resource=key, token=1)
    await store.put(names("list_other"), b"v", resource=names("x"), token=1)
    first = await store.list(names("list/"), after="", limit=3)
    rest = await store.list(names("list/"), after=first[-1].key, limit=3)
    assert [m.key for m in first + rest] == keys


async def test_list_prefix_wildcards_are_literal(store: SqlObjectStore, names: Names) -> None:
    await store.put(names("a%b"), b"v", resource=names("r"), token=1)
    await store.put(names("axb"), b"v", resource=names("r"), token=1)
    assert [m.key for m in await store.list(names("a%"), after="", limit=10)] == [names("a%b")]


async def test_list_prefix_is_case_exact(store: SqlObjectStore, names: Names) -> None:
    """SQLite's LIKE ignores ASCII case: a key scoped to `.../a/` must not list `.../A/...`."""
    await store.put(names("a/mine"), b"v", resource=names("a/mine"), token=1)
    await store.put(names("A/secret"), b"v", resource=names("A/secret"), token=1)
    assert [m.key for m in await store.list(names("a/"), after="", limit=10)] == [names("a/mine")]
    assert [m.key for m in await store.list(names("A/"), after="", limit=10)] == [names("A/secret")]


async def test_concurrent_tokens_commit_in_non_decreasing_order(store: SqlObjectStore, names: Names) -> None:
    """Many writers at once: the accepted tokens, in commit (version) order, never decrease."""
    key = names("race")
    tokens = [7, 3, 9, 9, 1, 12, 5, 12, 11, 2, 15, 14]

    async def write(token: int) -> tuple[int, int] | None:
        try:
            meta = await store.put(key, str(token).encode(), resource=key, token=token)
        except BelowMark:
            return None
        assert meta.version is not None
        return meta.version, token

    results = [r for r in await asyncio.gather(*(write(t) for t in tokens)) if r is not None]
    in_commit_order = [token for _, token in sorted(results)]
    assert in_commit_order == sorted(in_commit_order)
    assert await store.mark(key) == 15
    assert (await store.get(key, resource=key, token=None)).data == b"15"
