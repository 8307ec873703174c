"""Answers are counted per route, method and status, each combination its own series, and the
method label stays bounded whatever a client sends."""

from __future__ import annotations

from gateway.metrics import Metrics


def test_answers_are_counted_per_route_method_and_status() -> None:
    metrics = Metrics()
    for status in (201, 201, 409):
        metrics.answered("/v1/objects/{key}", "PUT", status)
    metrics.answered("unmatched", "GET", 404)
    text = metrics.render().decode()
    assert 'fencegate_requests_total{method="PUT",route="/v1/objects/{key}",status="201"} 2.0' in text
    assert 'fencegate_requests_total{method="PUT",route="/v1/objects/{key}",status="409"} 1.0' in text
    assert 'fencegate_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text


def test_an_unknown_method_is_counted_as_other() -> None:
    metrics = Metrics()
    for method in ("FOOBAR1", "FOOBAR2"):
        metrics.answered("unmatched", method, 405)
    text = metrics.render().decode()
    assert 'fencegate_requests_total{method="other",route="unmatched",status="405"} 2.0' in text
    assert "FOOBAR" not in text
