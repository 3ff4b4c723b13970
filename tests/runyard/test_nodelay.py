"""The API's connections have Nagle's algorithm off, also when the listening socket comes
without its protocol number, as uvicorn hands it to its worker processes."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from uvicorn import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from runyard.nodelay import NoDelayHttpToolsProtocol


async def _nodelay_of_a_connection(protocol_class: type[HttpToolsProtocol]) -> int:
    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("no request is sent")

    config = Config(app=app, http=protocol_class)
    config.load()
    state = ServerState()
    made: list[HttpToolsProtocol] = []

    def protocol() -> HttpToolsProtocol:
        made.append(protocol_class(config=config, server_state=state, app_state={}))
        return made[-1]

    # As uvicorn binds the socket it hands its worker processes: without a protocol
    # number (0), which the accepted connections inherit.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        assert listener.proto == 0
        server = await asyncio.get_running_loop().create_server(protocol, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection(*listener.getsockname())
            for _ in range(500):
                if made and made[0].transport is not None:
                    break
                await asyncio.sleep(0.01)
            sock = made[0].transport.get_extra_info("socket")
            nodelay = int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()
            await writer.wait_closed()
            return nodelay


@pytest.mark.parametrize(
    ("protocol_class", "nodelay"), [(HttpToolsProtocol, 0), (NoDelayHttpToolsProtocol, 1)]
)
def test_a_connection_from_a_socket_without_its_protocol_number(
    protocol_class: type[HttpToolsProtocol], nodelay: int
) -> None:
    # uvicorn's own protocol leaves Nagle on there (what made every kept-alive request wait
    # 40 ms for the client's delayed ACK); Runyard's turns it off.
    # In a thread of its own: another test in this process may have left a loop running.
    found: list[int] = []
    worker = threading.Thread(
        target=lambda: found.append(asyncio.run(_nodelay_of_a_connection(protocol_class)))
    )
    worker.start()
    worker.join(30)
    assert found == [nodelay]
