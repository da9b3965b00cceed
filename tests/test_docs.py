"""README.md stays a front door (short, the two commands, links into docs/), and every relative link in it and in
docs/*.md reaches a file that is there, and a heading that is there where it names one. (``mkdocs build --strict``,
which ``make test`` runs, checks the docs' links too; this covers README, which is not part of the site.)"""

from __future__ import annotations

import re
from pathlib import Path

from markdown.extensions.toc import slugify

from probes import families

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)

# the Quick start's two commands, as a new user copies them
COMMANDS = (
    "make app    # creates .venv, installs everything, starts the app on the offline default (http://localhost:8501)",
    "make test   # creates .venv if needed, installs everything, runs the whole test suite",
)


def _anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as MkDocs (Python-Markdown's toc) and GitHub make them for these titles."""
    text = FENCE.sub("", page.read_text())
    return {slugify(m.group(1), "-") for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: outside the repository
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_file():
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return broken


def test_the_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 300, "README.md is the front door: the reference goes into docs/"
    for command in COMMANDS:
        assert command in text
    assert "docs/index.md" in text and ".venv/bin/mkdocs serve" in text  # where the reference is, and its site
    assert re.search(r"!\[[^\]]*\]\(docs/images/[\w-]+\.png\)", text), "one screenshot"


def test_every_relative_link_reaches_a_file():
    pages = [README, *sorted(DOCS.glob("*.md"))]
    assert len(pages) > 10
    broken = [b for page in pages for b in _broken_links(page)]
    assert not broken, broken


def test_every_docs_page_is_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in DOCS.glob("*.md") if not re.search(rf":\s*{re.escape(p.name)}\s*$", nav, re.M)]
    assert not missing, f"pages the site's nav does not list: {missing}"


def _first_paragraph(page: Path) -> str:
    return " ".join(page.read_text().split("\n\n")[1].split())


def test_the_lists_of_families_are_the_registry():
    """Where the docs list families (every one, the decoders, the rotary ones), the list is the records' in
    :func:`probes.families.in_words`'s words: each family's title once, none the records lack. (docs/models.md's
    table: tests/test_families.py.)"""
    every, decoders = families.in_words(), families.in_words(families.decoders())
    rotary = families.in_words(f for f in families.families() if f.positions == "rotary")
    lists = {README: [every], DOCS / "index.md": [every], DOCS / "generation.md": [decoders],
             DOCS / "head-effects.md": [every, rotary, decoders]}
    missing = [(page.name, words) for page, wanted in lists.items() for words in wanted
               if not re.search(re.escape(f"({words}") + r"[);:]", " ".join(page.read_text().split()))]
    assert not missing, f"write these lists as the registry says them: {missing}"
    assert every in _first_paragraph(README) and every in _first_paragraph(DOCS / "index.md")  # the first line
