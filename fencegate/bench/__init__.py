"""Benchmarks against peers and limits; every claim is a same-run ratio."""

__all__: list[str] = []
