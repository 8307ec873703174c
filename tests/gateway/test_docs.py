"""The curl examples of docs/gateway.md work as written, against a real `fencegate serve`.

Each `$ command` line of the console blocks runs in bash with `FG` pointing at
the gateway (the `FG=` line itself is the only one skipped); its output must
be exactly the lines shown under it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from fencegate.lab.cluster.gateway import GatewayProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"


def console_examples(text: str) -> list[tuple[str, str]]:
    examples: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                examples.append((line[2:], []))
            else:
                examples[-1][1].append(line)
    return [(command, "\n".join(output)) for command, output in examples if not command.startswith("FG=")]


def test_every_curl_example_prints_what_the_doc_shows(tmp_path: Path) -> None:
    examples = console_examples(DOC.read_text())
    assert len(examples) >= 10
    gateway = GatewayProcess(tmp_path / "gw.log", "--data-dir", str(tmp_path / "data"))
    url = gateway.start()
    try:
        for command, expected in examples:
            run = subprocess.run(
                ["bash", "-c", command],
                capture_output=True,
                text=True,
                env={**os.environ, "FG": url},
                timeout=30,
                check=False,
            )
            assert run.stdout.rstrip("\n") == expected, command
    finally:
        gateway.stop()
