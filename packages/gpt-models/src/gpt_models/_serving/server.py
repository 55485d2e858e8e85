"""The HTTP server (uvicorn) around the app, and its stop: SIGTERM (or Ctrl-C) closes the port,
lets the requests in flight finish for up to the drain deadline, stops the engine and returns.

uvicorn re-raises a signal it handled once it has shut down (so that the process dies of it);
a SIGTERM here is the normal way to stop a server, so it is not re-raised: the command exits 0.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any, TextIO

import uvicorn

from .app import Service, make_app


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, ready: str, log: TextIO) -> None:
        super().__init__(config)
        self.ready, self.log = ready, log

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:  # the port is bound: say where (--port 0 picked one)
            port = bound_port(self) or self.config.port
            url = f"http://{self.config.host}:{port}/v1"
            print(f"gpt serve: ready: {self.ready} on {url}", file=self.log, flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:  # a stop asked for, not a death: drain, then exit 0
            captured: list[int] = getattr(self, "_captured_signals", [])
            self._captured_signals = [s for s in captured if s != signal.SIGTERM]


def serve(service: Service, host: str, port: int, drain_s: float, log: TextIO, what: str) -> None:
    """Serve until SIGTERM/SIGINT; then drain requests for up to ``drain_s`` seconds. ``what``:
    the run served, for the line that says the server is ready."""
    config = uvicorn.Config(
        make_app(service),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=max(1, round(drain_s)),
        access_log=False,
        lifespan="off",
    )
    ready = f"{what} as model {service.model.name!r}"
    server = _Server(config, ready, log)
    service.engine.start()
    try:
        server.run()
    finally:
        service.engine.stop()
    print("gpt serve: stopped (requests drained)", file=log, flush=True)


def bound_port(server: Any) -> int | None:
    """The port a started uvicorn server listens on (for ``--port 0``)."""
    for s in getattr(server, "servers", []):
        for sock in s.sockets:
            return int(sock.getsockname()[1])
    return None
