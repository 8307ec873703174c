"""`fencegate serve` as a real process, driven synchronously: start on a free port, read it back, kill.

For tests and the soak (the lab drives its gateway from asyncio:
`fencegate.lab.gateway_process`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from fencegate.lab.cluster.errors import ServerStartError

START_DEADLINE = 30.0
STOP_DEADLINE = 15.0
LOG_TAIL = 2000  # characters of its log an error shows
NAME = "fencegate serve"
_LISTENING = re.compile(r"listening on (https?://\S+)")


class GatewayProcess:
    """One `fencegate serve --port 0 ...`; `url` is known once `start()` returned."""

    def __init__(self, log_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self.args = args
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        """Start (or start again) and wait until it logs the address it listens on."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fencegate.cli", "serve", "--port", "0", *self.args],
                stdout=log,
                stderr=log,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            text = self.log_path.read_text()[offset:]
            found = _LISTENING.search(text)
            if found:
                self.url = found.group(1)
                return self.url
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"exited {self.proc.returncode}", name="fencegate serve", log=text[-2000:]
                )
            time.sleep(0.05)
        tail = self.log_path.read_text()[-LOG_TAIL:]
        raise ServerStartError(f"did not listen within {START_DEADLINE}s", name=NAME, log=tail)

    def kill9(self) -> None:
        """SIGKILL: no shutdown work, as in a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=STOP_DEADLINE)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_DEADLINE)
