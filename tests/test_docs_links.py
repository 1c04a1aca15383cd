"""Every relative link of README.md and docs/**/*.md points to an existing file, and its #anchor to a heading there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT

FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked."""
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (``-`` and ``_`` kept), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the headings of ``path`` (repeated headings get ``-1``, ``-2``, ...)."""
    seen: dict[str, int] = {}
    result = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(path: Path) -> list[str]:
    """The relative links of ``path`` whose file or anchor does not exist, as ``'target: why'``."""
    problems = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                problems.append(f"{target}: no file {linked}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{target}: no heading with anchor #{anchor} in {linked.name}")
    return problems


DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=[str(p.relative_to(REPO_ROOT)) for p in DOCS])
def test_every_relative_link_resolves(doc):
    assert broken_links(doc) == [], f"{doc.relative_to(REPO_ROOT)}: broken links"


def test_readme_links_the_docs_pages():
    """The README is the front door: every page under docs/ is reachable from it, directly or through a linked page."""
    reachable, todo = set(), [REPO_ROOT / "README.md"]
    while todo:
        page = todo.pop()
        for line in prose_lines(page.read_text(encoding="utf-8")):
            for target in LINK.findall(INLINE_CODE.sub("", line)):
                file_part = target.partition("#")[0]
                if not file_part or re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                linked = (page.parent / file_part).resolve()
                if linked.suffix == ".md" and linked.exists() and linked not in reachable:
                    reachable.add(linked)
                    todo.append(linked)
    unreachable = [str(p.relative_to(REPO_ROOT)) for p in DOCS[1:] if p.resolve() not in reachable]
    assert unreachable == []


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## The `--streaming true` flag, in short\n\n## Same\n\n## Same\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#the---streaming-true-flag-in-short) [ok](other.md#same-1) [ok](#here)\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere) [web](https://example.com/x.md)\n"
        "`[in code](missing_in_code.md)`\n"
        "```\n[in a block](missing_in_block.md)\n# not a heading\n```\n"
        "## Here\n"
    )
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert problems[0].startswith("missing.md: no file")
    assert problems[1] == "other.md#nowhere: no heading with anchor #nowhere in other.md"
    assert "not-a-heading" not in anchors(page)
    assert slug("Measured: folders saved with transformers 5.24.0, loaded with each release") == (
        "measured-folders-saved-with-transformers-5240-loaded-with-each-release"
    )
