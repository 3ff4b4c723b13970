"""contract.storage's file:// branch: names that mean something in a URI ('#', '?', '%')
stay file names, nothing lands outside the URI it is joined to, and what a killed upload
leaves behind is never taken for data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contract import storage
from tests.runtime.uploads import kill_an_upload

# Each is a file name, not URI syntax: a fragment, a query, escapes, an escaped "..".
AWKWARD_NAMES = ["model#3.pt", "what?.pt", "100%.pt", "a%20b.pt", "%2e%2e/%2e%2e/x.pt"]


def _all_files(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root``, hidden ones included."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file()
    }


@pytest.mark.parametrize("name", AWKWARD_NAMES)
def test_put_file_stores_a_file_under_its_own_name(tmp_path: Path, name: str) -> None:
    base = tmp_path / "store" / "job"
    source = tmp_path / "source"
    source.write_bytes(b"checkpoint")

    uri = storage.join(base.as_uri(), name)
    storage.put_file(source, uri)

    assert storage.local_path(uri) == base / name
    assert _all_files(tmp_path / "store") == {f"job/{name}": b"checkpoint"}
    assert storage.list_objects(uri) == [(uri, 10)]


def test_join_refuses_a_path_that_leaves_the_uri(tmp_path: Path) -> None:
    base = (tmp_path / "store").as_uri()
    with pytest.raises(storage.StorageError, match="refused: its path leaves"):
        storage.join(base, "../outside.pt")
    assert storage.join(base, "a/../b.pt").startswith(base)


def test_s3_keys_are_joined_as_they_are() -> None:
    assert storage.join("s3://b/ckpt/", "model#3.pt") == "s3://b/ckpt/model#3.pt"
    assert storage.concat("s3://b/part-", "0%1") == "s3://b/part-0%1"


def test_a_file_uri_with_a_bare_fragment_or_query_is_refused(tmp_path: Path) -> None:
    for uri in (f"{tmp_path.as_uri()}/model#3.pt", f"{tmp_path.as_uri()}/what?.pt"):
        with pytest.raises(storage.StorageError, match="must write '\\?' as %3F and '#' as %23"):
            storage.local_path(uri)


def test_names_that_are_not_utf8_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    name = os.fsdecode(b"caf\xe9.bin")  # Latin-1, as an old tool may have written it
    (root / name).write_bytes(b"bytes")

    [item] = storage.listing(root.as_uri())

    assert storage.local_path(item.uri) == root / name
    assert storage.size(item.uri) == 5
    fetched = storage.fetch(root.as_uri(), tmp_path / "out", shard=(0, 1))
    assert _all_files(fetched) == {name: b"bytes"}


def test_concat_encodes_the_key_and_keeps_it_below_the_prefix(tmp_path: Path) -> None:
    prefix = f"{(tmp_path / 'data').as_uri()}/part-"
    assert storage.local_path(storage.concat(prefix, "1#2")) == tmp_path / "data" / "part-1#2"
    with pytest.raises(storage.StorageError, match="refused: its path leaves"):
        storage.concat(prefix, "x/../../../y")


def test_what_a_killed_upload_leaves_is_not_listed_or_fetched(tmp_path: Path) -> None:
    store = tmp_path / "store"
    whole = tmp_path / "old.pt"
    whole.write_bytes(b"o" * 500)
    storage.put_file(whole, storage.join(store.as_uri(), "model.pt"))
    bigger = tmp_path / "new.pt"
    bigger.write_bytes(b"n" * 5000)

    kill_an_upload(bigger, storage.join(store.as_uri(), "model.pt"))

    [leftover] = [name for name in os.listdir(store) if name != "model.pt"]
    assert storage.is_partial(leftover)
    assert (store / leftover).stat().st_size == 1000  # cut off mid-copy
    assert [item.relative for item in storage.listing(store.as_uri())] == ["model.pt"]
    storage.fetch(store.as_uri(), tmp_path / "restored")
    assert _all_files(tmp_path / "restored") == {"model.pt": b"o" * 500}
