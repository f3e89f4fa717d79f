"""The README stays a short front door, and every relative link in it and in docs/ reaches a file."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def broken_links(page: Path) -> list[str]:
    """The relative link targets of a Markdown page that name no existing file (URLs, anchors skipped)."""
    return [t for t in LINK.findall(page.read_text())
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")
            and not (page.parent / t.split("#", 1)[0]).exists()]


def test_readme_is_short_and_keeps_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "make quickstart" in text and "make test" in text


def test_relative_links_resolve(tmp_path):
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    problems = [f"{page.relative_to(ROOT)} -> {t}" for page in pages for t in broken_links(page)]
    assert not problems, "\n".join(problems)
    (tmp_path / "p.md").write_text("[a](missing.md) [b](p.md#x) [c](https://example.org) [d](#top)")
    assert broken_links(tmp_path / "p.md") == ["missing.md"]
