"""The README and the pages of docs/ link to what is there: every relative link names a file
of the repository, and every `#anchor` a heading of the page it points into (as GitHub
makes anchors from headings)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])


def _tokens(page: Path) -> Iterator[Token]:
    for token in MarkdownIt().enable("table").parse(page.read_text()):
        yield token
        yield from token.children or ()


def _anchors(page: Path) -> set[str]:
    tokens = list(MarkdownIt().enable("table").parse(page.read_text()))
    return {
        _slug(inline.content)
        for heading, inline in pairwise(tokens)
        if heading.type == "heading_open"
    }


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower())
    return text.replace(" ", "-")


def _links(page: Path) -> list[str]:
    targets = []
    for token in _tokens(page):
        if token.type == "link_open":
            targets.append(str(token.attrs["href"]))
        elif token.type == "image":
            targets.append(str(token.attrs["src"]))
    return [target for target in targets if not re.match(r"^[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in _anchors(destination):
            broken.append(f"{target}: no such heading")
    assert broken == []


def test_the_pages_have_links_to_check() -> None:
    assert any(_links(page) for page in PAGES)
