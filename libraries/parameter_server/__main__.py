"""``python -m libraries.parameter_server``: run this instance's parameter server.

Reads the env contract (see the package docstring), serves its shard, and exits 0 once
every worker has called ``shutdown()``, or 1 when a worker is lost or never joins.
"""

from __future__ import annotations

import argparse
import logging
import sys

from libraries.parameter_server.contract import read_contract
from libraries.parameter_server.errors import ParameterServerError
from libraries.parameter_server.group import DEFAULT_JOIN_TIMEOUT_S
from libraries.parameter_server.server import DEFAULT_WORKER_TIMEOUT_S, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libraries.parameter_server")
    parser.add_argument(
        "--worker-timeout",
        type=float,
        default=DEFAULT_WORKER_TIMEOUT_S,
        help="seconds without a step or heartbeat after which a worker is presumed dead",
    )
    parser.add_argument(
        "--join-timeout",
        type=float,
        default=DEFAULT_JOIN_TIMEOUT_S,
        help="seconds to wait for every server and worker of the job to join",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    try:
        contract = read_contract()
        return serve(
            contract, worker_timeout_s=args.worker_timeout, join_timeout_s=args.join_timeout
        )
    except ParameterServerError as error:
        print(f"parameter server: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
