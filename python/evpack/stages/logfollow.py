"""Following a growing log file on the terminal: the runner shows a stage process's log, the bench stage
each shard's, line by line, with a heartbeat line after HEARTBEAT_S of silence."""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

log = logging.getLogger("evpack")
HEARTBEAT_S = 20.0


class LogFollower(threading.Thread):
    """Shows a growing log file on the terminal (via logging) until stopped; a heartbeat line when
    nothing new arrived for HEARTBEAT_S."""

    def __init__(self, path: Path | None, stage: str) -> None:
        super().__init__(daemon=True)
        self.path, self.stage, self.stop = path, stage, threading.Event()

    def run(self) -> None:
        t0 = last_news = time.monotonic()
        pos, partial = 0, b""
        while not self.stop.wait(0.5):
            chunk = b""
            if self.path is not None:
                try:
                    with open(self.path, "rb") as f:
                        f.seek(pos)
                        chunk = f.read()
                except FileNotFoundError:
                    pass
            if chunk:
                pos += len(chunk)
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        log.info("  %s | %s", self.stage, line.decode("utf-8", "replace").rstrip()[:300])
                        last_news = time.monotonic()
            if time.monotonic() - last_news >= HEARTBEAT_S:
                log.info("  %s | still running, %.0f s elapsed", self.stage, time.monotonic() - t0)
                last_news = time.monotonic()
