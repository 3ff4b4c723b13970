"""An instance handed a tarball of code that cannot unpack (a name no file system takes,
a decompression bomb, a directory and a file of one name) fails the job as a ClientError
naming it, instead of crashing; code that a channel brings (as the SageMaker SDK ships it
with network isolation) is unpacked from there and run."""

from __future__ import annotations

import shutil
from pathlib import Path
from tarfile import DIRTYPE, REGTYPE

import pytest

from contract.archive import make_tarball
from tests.archives import archive_of, archive_with_member, gzip_bomb
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
        (
            lambda d: archive_of(d / "code.tar.gz", ("pkg", DIRTYPE), ("pkg", REGTYPE)),
            "refused member 'pkg': a file where a directory of that name came before it",
        ),
        (
            lambda d: archive_of(d / "code.tar.gz", ("pkg", REGTYPE), ("pkg", DIRTYPE)),
            "refused member 'pkg': a directory where a file of that name came before it",
        ),
    ],
    ids=["empty-name", "2000-deep", "bomb", "dir-then-file", "file-then-dir"],
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


# Where the SageMaker SDK names its code when it ships it as a channel (network isolation).
CODE_IN_CHANNEL = "/opt/ml/input/data/code/sourcedir.tar.gz"
REPORT = "import json, os\nprint('ran from ' + os.getcwd(), os.environ['SM_MODULE_DIR'])\n"


@pytest.mark.parametrize("packed", [True, False], ids=["tarball", "directory"])
def test_code_a_channel_brings_is_unpacked_and_run(tmp_path: Path, packed: bool) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(REPORT)
    (source / "helpers").mkdir()
    (source / "helpers" / "util.py").write_text("x = 1\n")
    if packed:
        channel = make_tarball(source, tmp_path / "upload" / "sourcedir.tar.gz")
        source_uri = CODE_IN_CHANNEL
    else:
        channel = tmp_path / "upload"
        shutil.copytree(source, channel / "sourcedir")
        source_uri = "/opt/ml/input/data/code/sourcedir"
    request = launch_request(source, source_uri=source_uri, inputs={"code": channel.as_uri()})
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    assert f"Unpacking code from {source_uri}" in output
    assert f"ran from {base / 'code'} {source_uri}" in output  # SM_MODULE_DIR: as the SDK sent it
    assert (base / "code" / "helpers" / "util.py").read_text() == "x = 1\n"


def test_a_channel_without_the_code_named_is_a_client_error(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(REPORT)
    data = tmp_path / "data"
    data.mkdir()
    (data / "other.tar.gz").write_bytes(b"")
    request = launch_request(source, source_uri=CODE_IN_CHANNEL, inputs={"code": data.as_uri()})
    base = write_instances(tmp_path / "job", request)["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    assert (base / "output" / "failure").read_text() == (
        f"ClientError: source {CODE_IN_CHANNEL}: its channel brought no such file"
    )


@pytest.mark.parametrize(
    ("source_uri", "link", "refused"),
    [
        # The tarball itself a link to one outside the channel.
        (
            CODE_IN_CHANNEL,
            "sourcedir.tar.gz",
            f"{CODE_IN_CHANNEL} is a symbolic link, not a regular file",
        ),
        # A directory on the way to it a link to a directory outside the channel.
        (
            "/opt/ml/input/data/code/sub/sourcedir.tar.gz",
            "sub",
            "/opt/ml/input/data/code/sub is a symbolic link, not a directory",
        ),
    ],
    ids=["tarball", "directory-on-the-way"],
)
def test_code_reached_through_a_link_in_its_channel_is_refused_naming_the_path(
    tmp_path: Path, source_uri: str, link: str, refused: str
) -> None:
    """What a channel brings is the job's: a link there to anything of the machine's is
    not followed, whatever the link's target holds (here, code that would run)."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(REPORT)
    outside = tmp_path / "outside"
    make_tarball(source, outside / "sourcedir.tar.gz")
    data = tmp_path / "data"
    data.mkdir()
    (data / "readme.txt").write_text("the channel's own file\n")
    request = launch_request(source, source_uri=source_uri, inputs={"code": data.as_uri()})
    base = write_instances(tmp_path / "job", request)["algo-1"]
    channel = base / "input" / "data" / "code"
    channel.mkdir(parents=True)
    target = outside / "sourcedir.tar.gz" if link == "sourcedir.tar.gz" else outside
    (channel / link).symlink_to(target)
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    assert (base / "output" / "failure").read_text() == (
        f"ClientError: source {source_uri}: refused: {refused}"
    )
    assert list((base / "code").iterdir()) == []
