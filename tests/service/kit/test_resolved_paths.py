"""A batch of submissions resolves each path once; outside a batch every call looks again."""

from __future__ import annotations

import os
from pathlib import Path

from service.kit import resolved_paths


def _point(link: Path, target: Path) -> None:
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def test_outside_a_batch_each_call_follows_the_link_as_it_is_now(tmp_path: Path) -> None:
    first, second, link = tmp_path / "first", tmp_path / "second", tmp_path / "data"
    first.mkdir()
    second.mkdir()
    _point(link, first)
    assert resolved_paths.realpath(link) == os.path.realpath(first)
    _point(link, second)
    assert resolved_paths.realpath(link) == os.path.realpath(second)


def test_inside_a_batch_a_path_is_resolved_once(tmp_path: Path) -> None:
    first, second, link = tmp_path / "first", tmp_path / "second", tmp_path / "data"
    first.mkdir()
    second.mkdir()
    _point(link, first)
    with resolved_paths.resolved_once():
        assert resolved_paths.realpath(str(link)) == os.path.realpath(first)
        _point(link, second)
        # The batch is judged as of one moment: the answer it was given first, for the
        # link and for what is below it.
        assert resolved_paths.realpath(link) == os.path.realpath(first)
        assert resolved_paths.realpath(link / "x") == os.path.realpath(first / "x")
    # Once the batch ends, nothing it kept is used.
    assert resolved_paths.realpath(link) == os.path.realpath(second)


def test_inside_a_batch_every_path_resolves_as_realpath_resolves_it(tmp_path: Path) -> None:
    """A new path below a folder resolved already is resolved from that folder: links in
    it, relative links, ``..`` after a link and loops come out as realpath has them."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    (tmp_path / "a" / "link").symlink_to(tmp_path / "c")
    (tmp_path / "a" / "relative").symlink_to("../c")
    (tmp_path / "c" / "up").symlink_to("..")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    paths = [
        "a",
        "a/b",
        "a/link",
        "a/link/new/file",
        "a/relative/x",
        "a/../c",
        "a/./b",
        "a//b/",
        "missing/x",
        "loop/x",
        "c/up/a/link/x",
        "a/link/..",
        "a/link/../b",
    ]
    with resolved_paths.resolved_once():
        for each in paths:
            path = f"{tmp_path}/{each}"
            assert resolved_paths.realpath(path) == os.path.realpath(path), each
            assert resolved_paths.realpath(path) == os.path.realpath(path), each
