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
        # The batch is judged as of one moment: the answer it was given first.
        assert resolved_paths.realpath(link) == os.path.realpath(first)
        assert resolved_paths.realpath(link / "x") == os.path.realpath(second / "x")
    # Once the batch ends, nothing it kept is used.
    assert resolved_paths.realpath(link) == os.path.realpath(second)
