"""An instance handed a tarball of code that cannot unpack (a name no file system takes,
a decompression bomb) fails the job as a ClientError naming it, instead of crashing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.archives import archive_with_member, gzip_bomb
from tests.instances import launch_request, start_runtime, write_instances


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda d: archive_with_member(d / "code.tar.gz", ""), "refused member '': empty name"),
        (
            lambda d: archive_with_member(d / "code.tar.gz", "/".join(["d"] * 2000)),
            "path deeper than 64 directories",
        ),
        (lambda d: gzip_bomb(d / "code.tar.gz", 1024**3), "refused as a decompression bomb"),
    ],
    ids=["empty-name", "2000-deep", "bomb"],
)
def test_code_that_cannot_unpack_is_a_client_error(tmp_path: Path, make, why: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "src").mkdir()
    bundle = make(tmp_path / "src")
    request = launch_request(tmp_path / "src", source_uri=bundle.as_uri())
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    failure = (base / "output" / "failure").read_text()
    assert failure.startswith("ClientError: code.tar.gz: "), failure
    assert why in failure
    assert list((base / "code").iterdir()) == []
