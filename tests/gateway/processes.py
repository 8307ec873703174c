"""`fencegate serve` as a real process for tests: start on a free port, read the port back, kill."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

START_DEADLINE = 30.0
STOP_DEADLINE = 15.0
_LISTENING = re.compile(r"listening on (http://\S+)")


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
                raise RuntimeError(f"fencegate serve exited {self.proc.returncode}:\n{text[-2000:]}")
            time.sleep(0.05)
        tail = self.log_path.read_text()[-2000:]
        raise RuntimeError(f"fencegate serve did not listen within {START_DEADLINE}s:\n{tail}")

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
