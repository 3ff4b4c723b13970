"""uvicorn's HTTP/1.1 protocol, with Nagle's algorithm off on every connection.

asyncio turns Nagle off itself, but only on sockets it knows to be TCP by their protocol
number. The listening socket uvicorn hands its worker processes (``RUNYARD_API_WORKERS``
above 1) arrives there without it, and so do the connections accepted from it: a
response's last segment then waited for the client's delayed acknowledgement, 40 ms on
every request over a kept-alive connection.
"""

from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol


class NoDelayH11Protocol(H11Protocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
