"""The launch agent for instances that are separate machines (pods, EC2 instances): what
ssh and sshd are to mpirun on a cluster, with neither needed in the training image.

mpirun on the first instance calls ``<agent> <host> <command...>`` to start its daemon on
each host. The client below is that agent; every other instance of an MPI job runs the
server while it waits for the daemon (runtime.train), and the server runs the command as
the local agent would: through /bin/sh, in the instance's code directory and environment
(so the daemon carries the job marker that mpi.wait_for_daemon looks for).

    python3 -m runtime.launch.remote_agent <host> <command...>

Wire protocol, over TCP, in frames of a kind byte, a 4-byte big-endian length, a payload:
  server C: a fresh 32-byte challenge
  client R: its own 32-byte nonce, HMAC-SHA256(key, "client" challenge nonce body), body
            (JSON {"host", "command"}); the server refuses (N <reason>, then closes) a bad
            MAC, or accepts (A HMAC-SHA256(key, "server" challenge nonce)), and the client
            checks that too
  server 1/2: the command's stdout/stderr as it comes; X: its exit status (4 bytes, signed)
A connection that ends before X ends the command: its process group, and every process
carrying the command's marker (Open MPI's daemon detaches from the group). The key is
derived from the job's token, which never leaves the runtime: the first instance's runtime
leaves the key in a 0600 file under its base dir, where the client, a child of mpirun with
the launcher's environment (no token there), finds it through SM_BASE_DIR. A command for the
client's own host runs right there, as the local agent runs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import selectors
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from contract import variables
from contract.instance_config import ConfigError, InstanceConfig, load
from contract.layout import Paths
from runtime.launch import handover
from runtime.linux import procfs

CONNECT_ATTEMPT = 5.0
# A peer gets this long to authenticate before its connection is closed.
HANDSHAKE_TIMEOUT = 10.0
# SIGTERM first (Open MPI's daemon then ends its ranks), SIGKILL for what is left after.
KILL_GRACE = 3.0
# On stop, commands that are finishing on their own (the daemon after the job) get this long.
STOP_GRACE = 5.0
# What ssh exits with when it cannot reach or log in to a host; mpirun knows it as such.
UNREACHABLE = 255

NONCE = 32
MAX_REQUEST = 1 << 20
MAX_REFUSAL = 4096
CHUNK = 1 << 16
_HEADER = struct.Struct("!cI")
_STATUS = struct.Struct("!i")
CHALLENGE, REQUEST, ACCEPT, REFUSE = b"C", b"R", b"A", b"N"
STDOUT, STDERR, EXIT = b"1", b"2", b"X"
_KEY_CONTEXT = b"runyard launch agent v1"

Say = Callable[[str], None]


class DaemonLost(Exception):
    """The connection to a daemon's agent broke while the daemon ran."""


# How the agent starts a command: its argv and environment, as they are or changed.
Start = Callable[[list[str], dict[str, str]], tuple[list[str], dict[str, str]]]


def _as_it_is(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    return argv, env


class AgentError(Exception):
    """The agent cannot do its part: no key, no config, no listening port, no peer."""


class Refused(Exception):
    """A connection that did not prove it holds the job's key."""


# -- the key -------------------------------------------------------------------------------


def job_key(environ: Mapping[str, str]) -> bytes:
    """Derived from the secret the job's instances share (not from an instance's token,
    which is its own), so that a file the script could read never holds the secret."""
    shared = environ.get(variables.AGENT_KEY)
    if not shared:
        raise AgentError(f"{variables.AGENT_KEY} is not set: the launch agent cannot authenticate")
    return hmac.new(shared.encode(), _KEY_CONTEXT, hashlib.sha256).digest()


def key_file(paths: Paths) -> Path:
    return paths.base / ".runyard" / "agent.key"


def write_key_file(paths: Paths, key: bytes) -> None:
    path = key_file(paths)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            os.fchmod(file.fileno(), 0o600)  # a file left by an earlier attempt keeps its mode
            file.write(key.hex())
    except OSError as exc:
        raise AgentError(f"could not write the launch agent's key to {path}: {exc}") from exc


def read_key_file(paths: Paths) -> bytes:
    path = key_file(paths)
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError) as exc:
        raise AgentError(f"could not read the launch agent's key at {path}: {exc}") from exc


def _mac(key: bytes, role: bytes, *parts: bytes) -> bytes:
    # Every part but the last has a fixed length, so the concatenation is unambiguous.
    return hmac.new(key, b"".join((role, *parts)), hashlib.sha256).digest()


# -- framing -------------------------------------------------------------------------------


def _send(sock: socket.socket, kind: bytes, payload: bytes = b"") -> None:
    sock.sendall(_HEADER.pack(kind, len(payload)) + payload)


def _receive(sock: socket.socket, limit: int) -> tuple[bytes, bytes]:
    kind, size = _HEADER.unpack(_receive_exactly(sock, _HEADER.size))
    if size > limit:
        raise ConnectionError(f"a frame of {size} bytes, more than {limit}")
    return kind, _receive_exactly(sock, size)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the connection closed")
        data += chunk
    return bytes(data)


def _keep_alive(sock: socket.socket) -> None:
    # A peer whose machine vanishes sends no FIN; probes find it within a minute, which
    # ends the command (server) or the daemon's agent (client) instead of hanging.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 15)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 6)


# -- server --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    host: str
    command: str


def _authenticate(sock: socket.socket, key: bytes, host: str) -> Request:
    challenge = secrets.token_bytes(NONCE)
    try:
        _send(sock, CHALLENGE, challenge)
        kind, payload = _receive(sock, MAX_REQUEST)
    except TimeoutError:
        raise Refused("no launch request in time") from None
    except OSError as exc:
        raise Refused(f"no launch request ({exc})") from None
    if kind != REQUEST or len(payload) < 2 * NONCE:
        raise Refused("not a launch request")
    nonce, mac, body = payload[:NONCE], payload[NONCE : 2 * NONCE], payload[2 * NONCE :]
    if not hmac.compare_digest(mac, _mac(key, b"client", challenge, nonce, body)):
        raise Refused("authentication failed (it does not hold this job's key)")
    request = _parse_request(body)
    if request.host != host:
        raise Refused(f"the request is for {request.host!r}, this instance is {host!r}")
    _send(sock, ACCEPT, _mac(key, b"server", challenge, nonce))
    return request


def _parse_request(body: bytes) -> Request:
    try:
        data = json.loads(body)
        return Request(host=str(data["host"]), command=str(data["command"]))
    except (ValueError, TypeError, KeyError):
        raise Refused("a malformed launch request") from None


@dataclass
class _Command:
    """A command the agent started: its shell (the leader of a process group of its own)
    and the marker in the environment of everything it starts."""

    process: subprocess.Popen[bytes]
    marker: str

    def end(self) -> None:
        running = self.process.poll() is None
        # Once the shell is gone, its pid (and so its group's id) may be reused: then
        # only the marker says what is the command's.
        end_processes(self.process.pid if running else None, self.marker)


class AgentServer(socketserver.ThreadingTCPServer):
    """One thread per connection, one command per connection."""

    allow_reuse_address = True  # a restarted instance binds again at once
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        key: bytes,
        host: str,
        cwd: Path,
        env: Mapping[str, str],
        say: Say,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        start: Start = _as_it_is,
    ) -> None:
        self.address_family = _family(address[0])
        self.key = key
        self.host = host
        self.cwd = cwd
        self.env = dict(env)
        self.say = say
        self.handshake_timeout = handshake_timeout
        # How a command is started: as it is, or confined as the job's user.
        self.start = start
        self._lock = threading.Lock()
        self._running: dict[socket.socket, _Command] = {}
        self._started: list[_Command] = []
        self._closing = False
        super().__init__(address, _Connection)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            # The wildcard then takes IPv4 peers too.
            with contextlib.suppress(OSError):
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def serve_connection(self, sock: socket.socket, peer: str) -> None:
        sock.settimeout(self.handshake_timeout)
        try:
            request = _authenticate(sock, self.key, self.host)
        except Refused as exc:
            self.say(f"Launch agent: refused the connection from {peer}: {exc}")
            with contextlib.suppress(OSError):
                _send(sock, REFUSE, str(exc).encode()[:MAX_REFUSAL])
            return
        sock.settimeout(None)
        _keep_alive(sock)
        self.say(f"Launch agent: running a command for {peer}")
        try:
            command = self._start(sock, request.command)
        except (OSError, AgentError) as exc:
            self.say(f"Launch agent: could not start the command for {peer}: {exc}")
            with contextlib.suppress(OSError):
                _send(sock, STDERR, f"runyard launch agent: {exc}\n".encode())
                _send(sock, EXIT, _STATUS.pack(127))
            return
        try:
            with command.process:
                self._finish(sock, command, peer)
        finally:
            with self._lock:
                self._running.pop(sock, None)

    def _start(self, sock: socket.socket, command: str) -> _Command:
        # Under the lock: stop() must either see the command or keep it from starting.
        with self._lock:
            if self._closing:
                raise AgentError("this instance's runtime is ending")
            marker = secrets.token_hex(16)
            argv, env = self.start(
                ["/bin/sh", "-c", command], {**self.env, variables.AGENT_COMMAND: marker}
            )
            process = subprocess.Popen(
                argv,
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # a group of its own, ended as one
            )
            started = self._running[sock] = _Command(process, marker)
            self._started.append(started)
        return started

    def _finish(self, sock: socket.socket, command: _Command, peer: str) -> None:
        if not _relay(sock, command.process):
            self.say(f"Launch agent: the connection from {peer} dropped; ending its command")
            command.end()
            command.process.wait()
            return
        with contextlib.suppress(OSError):
            _send(sock, EXIT, _STATUS.pack(_exit_status(command.process.wait())))

    def stop(self, grace: float = STOP_GRACE) -> None:
        """No new connections; commands still running after ``grace`` are ended, and so
        are their connections and whatever any command left behind, so that nothing
        outlives the instance's runtime."""
        self.shutdown()
        with self._lock:
            self._closing = True
        deadline = time.monotonic() + grace
        while self._still_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        for command in self._started:
            command.end()
        with self._lock:
            connections = list(self._running)
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.server_close()  # joins the connection threads

    def _still_running(self) -> bool:
        # A command counts until its connection has been told how it ended: the daemon
        # may have exited a moment before its status went out, and a connection cut
        # then reads, on the first instance, as an instance lost.
        with self._lock:
            return bool(self._running)


class _Connection(socketserver.BaseRequestHandler):
    server: AgentServer

    def handle(self) -> None:
        host, port = self.client_address[:2]
        try:
            self.server.serve_connection(self.request, f"{host}:{port}")
        except OSError as exc:  # the peer went away mid-frame; its command is ended
            self.server.say(f"Launch agent: connection from {host}:{port} failed: {exc}")


def _relay(sock: socket.socket, process: subprocess.Popen[bytes]) -> bool:
    """The command's output to the peer until it ends; False if the peer went first."""
    assert process.stdout is not None  # PIPE in _start
    assert process.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, STDOUT)
        selector.register(process.stderr, selectors.EVENT_READ, STDERR)
        selector.register(sock, selectors.EVENT_READ, None)
        pipes = 2
        # The pipes close when the shell and every child holding them are gone; a shell
        # that closed them early is still waited for, with the peer still watched.
        while pipes or process.poll() is None:
            for ready, _ in selector.select(timeout=None if pipes else 0.1):
                if ready.data is None:
                    if not _peer_still_there(sock):
                        return False
                    continue
                chunk = os.read(ready.fd, CHUNK)
                if not chunk:
                    selector.unregister(ready.fileobj)
                    pipes -= 1
                    continue
                try:
                    _send(sock, ready.data, chunk)
                except OSError:
                    return False
    return True


def _peer_still_there(sock: socket.socket) -> bool:
    # The client sends nothing after its request: readable means closed (or reset).
    try:
        return bool(sock.recv(CHUNK))
    except OSError:
        return False


def _exit_status(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode  # as a shell reports a signal


def end_processes(pgid: int | None, marker: str, grace: float = KILL_GRACE) -> None:
    """SIGTERM, then SIGKILL after ``grace``, to the process group ``pgid`` and to every
    process carrying ``marker``: Open MPI's daemon detaches into a session of its own,
    and its ranks into groups of their own, out of reach of the group alone."""

    def members() -> list[int]:
        group = procfs.group_members(pgid) if pgid is not None else []
        return sorted({*group, *_marked(marker)})

    if not (remaining := members()):
        return
    procfs.signal_pids(remaining, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (remaining := members()) and time.monotonic() < deadline:
        time.sleep(0.05)
    procfs.signal_pids(remaining, signal.SIGKILL)


def _marked(marker: str) -> list[int]:
    wanted = f"{variables.AGENT_COMMAND}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        stat = procfs.read_stat(int(entry.name))
        if wanted in environ and stat is not None and stat[0] not in "ZX":
            found.append(int(entry.name))
    return found


def _family(address: str) -> socket.AddressFamily:
    if address:
        return socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    return socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET


def listen_address(config: InstanceConfig) -> str:
    """This instance's address when it is one, else every interface: a name (a pod's DNS
    record, an EC2 host alias) may not resolve yet when the runtime starts, or resolve to
    an address this machine does not hold; every connection is authenticated anyway."""
    address = config.host_addresses.get(config.current_host, "")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return "::" if _family("") == socket.AF_INET6 else ""
    return address


@contextlib.contextmanager
def serving(
    config: InstanceConfig,
    key: bytes,
    env: Mapping[str, str],
    say: Say,
    *,
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
    stop_grace: float = STOP_GRACE,
    start: Start | None = None,
) -> Iterator[AgentServer]:
    """The server, for as long as the block runs; ``start`` gives the command and
    environment each command is started with (``runtime.linux.confine``'s, say)."""
    if config.agent_port is None:
        raise AgentError("this job has no agent_port for the launch agent to listen on")
    address = (listen_address(config), config.agent_port)
    try:
        server = AgentServer(
            address,
            key=key,
            host=config.current_host,
            cwd=config.paths.code,
            env=env,
            say=say,
            handshake_timeout=handshake_timeout,
            start=start or _as_it_is,
        )
    except OSError as exc:
        raise AgentError(f"the launch agent could not listen on port {address[1]}: {exc}") from exc
    thread = threading.Thread(target=server.serve_forever, name="launch-agent", daemon=True)
    thread.start()
    say(f"Launch agent listening on {address[0] or '*'}:{address[1]} for mpirun")
    try:
        yield server
    finally:
        server.stop(stop_grace)
        thread.join()


# -- client --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        return _give_up("usage: python -m runtime.launch.remote_agent <host> <command...>")
    host, command = args[0], " ".join(args[1:])  # as ssh joins a remote command's words
    try:
        config = _own_config()
        if host == config.current_host:
            _run_here(config, command)
        status = _run_there(config, host, command)
    except AgentError as exc:
        handover.record_failure(str(exc))
        return _give_up(str(exc))
    except DaemonLost as exc:
        handover.record_failure(str(exc), lost=True)
        return _give_up(str(exc))
    if status != 0:
        # The command is mpirun's daemon, which exits at once once it runs on its own.
        handover.record_failure(f"the daemon on {host} exited with status {status}")
    return status


def _give_up(message: str) -> int:
    print(f"runyard launch agent: {message}", file=sys.stderr, flush=True)
    return UNREACHABLE


def _own_config() -> InstanceConfig:
    base = os.environ.get(variables.BASE_DIR)
    if not base:
        raise AgentError(
            f"{variables.BASE_DIR} is not set (mpirun starts this from the Runyard runtime)"
        )
    try:
        config = load(Path(base))
    except ConfigError as exc:
        raise AgentError(str(exc)) from exc
    if config.agent_port is None:
        raise AgentError("this job has no agent_port: its instances run no launch agent")
    return config


def _run_here(config: InstanceConfig, command: str) -> NoReturn:
    # mpirun starts a daemon on its own host too when the host's name is not the
    # machine's: that one runs here, as ssh to localhost would, with mpirun's environment.
    os.chdir(config.paths.code)
    os.execve("/bin/sh", ["/bin/sh", "-c", command], dict(os.environ))


def _run_there(config: InstanceConfig, host: str, command: str) -> int:
    address = config.host_addresses.get(host)
    if address is None:
        raise AgentError(f"no instance named {host!r} in this job")
    port = config.agent_port
    assert port is not None  # checked in _own_config
    key = read_key_file(config.paths)
    try:
        patience = handover.patience()
    except handover.PatienceError as exc:
        raise AgentError(str(exc)) from None
    with _connect(host, address, port, patience) as sock:
        sock.settimeout(HANDSHAKE_TIMEOUT)
        _handshake(sock, key, host, command)
        sock.settimeout(None)  # a daemon may stay silent for as long as the job runs
        _keep_alive(sock)
        return _relay_output(sock, host)


def _connect(host: str, address: str, port: int, patience: float) -> socket.socket:
    deadline = time.monotonic() + patience
    delay, told = 0.1, False
    while True:
        try:
            return socket.create_connection((address, port), timeout=CONNECT_ATTEMPT)
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise AgentError(
                    f"could not reach the launch agent of {host} at {address}:{port} "
                    f"within {patience:g} s: {exc}"
                ) from exc
            if not told:
                told = True
                print(
                    f"runyard launch agent: waiting for {host} at {address}:{port} ({exc})",
                    file=sys.stderr,
                    flush=True,
                )
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def _handshake(sock: socket.socket, key: bytes, host: str, command: str) -> None:
    try:
        kind, challenge = _receive(sock, NONCE)
        if kind != CHALLENGE or len(challenge) != NONCE:
            raise AgentError(f"what listens on {host}'s agent port is not a Runyard launch agent")
        nonce = secrets.token_bytes(NONCE)
        body = json.dumps({"host": host, "command": command}).encode()
        _send(sock, REQUEST, nonce + _mac(key, b"client", challenge, nonce, body) + body)
        kind, payload = _receive(sock, MAX_REFUSAL)
    except OSError as exc:
        raise AgentError(f"the launch agent of {host} did not answer: {exc}") from exc
    if kind == REFUSE:
        reason = payload.decode(errors="replace")
        raise AgentError(f"the launch agent of {host} refused the command: {reason}")
    if kind != ACCEPT or not hmac.compare_digest(payload, _mac(key, b"server", challenge, nonce)):
        raise AgentError(f"the launch agent of {host} could not prove it holds this job's key")


def _relay_output(sock: socket.socket, host: str) -> int:
    sinks = {STDOUT: sys.stdout.buffer, STDERR: sys.stderr.buffer}
    while True:
        try:
            kind, payload = _receive(sock, CHUNK)
        except OSError as exc:
            raise DaemonLost(f"lost the connection to the launch agent of {host}: {exc}") from exc
        if kind == EXIT:
            status: int = _STATUS.unpack(payload)[0]
            return status
        sink = sinks.get(kind)
        if sink is not None:
            sink.write(payload)
            sink.flush()


if __name__ == "__main__":
    sys.exit(main())
