"""`fencegate demo` takes one fenced lease on a fresh cluster and leaves no server behind."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest

from fencegate.cli import main


def test_demo_prints_a_fenced_lease_and_stops_its_servers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["token"] == 1
    assert 0 < shown["validity_s"] < shown["ttl_s"]
    assert len(shown["nodes"]) == 5
    answers = list(shown["nodes"].values())
    assert answers.count("ok") >= 3  # a quorum granted it; the rest may not have answered yet
    assert set(answers) <= {"ok", "no answer yet: the outcome was settled by the others"}
    for url in shown["nodes"]:
        parts = urlsplit(url)
        with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
            sock.connect((str(parts.hostname), int(parts.port or 0)))
