"""uvicorn's HTTP/1.1 protocol (httptools' parser), with Nagle's algorithm off on every
connection.

asyncio turns Nagle off itself, but only on sockets it knows to be TCP by their protocol
number. The listening socket uvicorn hands its worker processes (``RUNYARD_API_WORKERS``
above 1) arrives there without it, and so do the connections accepted from it: a
response's last segment then waited for the client's delayed acknowledgement, 40 ms on
every request over a kept-alive connection. (uvloop, the API's loop where it installs,
turns Nagle off on every TCP connection; this is for where it does not.)
"""

from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class NoDelayHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
