"""README.md stays a front door (short, the two commands, links into docs/), and every relative link in it and in
docs/*.md reaches a file of the repository that is there, and a heading that is there where it names one.
(``mkdocs build --strict``, which ``make test`` runs, checks the docs' links too; this covers README, which is not
part of the site.) The built site navigates from its files, with search, and fetches nothing from elsewhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown.extensions.toc import slugify

from probes import families

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)

# the Quick start's two commands, as a new user copies them
COMMANDS = (
    "make app    # creates .venv, installs the app, starts it on the offline default (http://localhost:8501)",
    "make test   # creates .venv if needed, installs the app and the test tools, runs the whole test suite",
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
        if not file.is_relative_to(ROOT):
            broken.append(f"{page.relative_to(ROOT)}: {target} (outside the repository: a clone lacks it)")
        elif not file.is_file():
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


class _Links(HTMLParser):
    """Every address an HTML page links or loads: (tag, attribute, value)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [(tag, name, value) for name, value in attrs if name in ("href", "src") and value]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as ``make test`` builds it (mkdocs.yml, --strict), in a folder of its own."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def _addresses(site: Path) -> list[tuple[Path, str, str, str]]:
    """(page, tag, attribute, address) of the site's pages; not 404.html, which a web server shows at any depth, so
    its addresses start at the server's root (/assets/…)."""
    found = []
    for page in sorted(p for p in site.rglob("*.html") if p.name != "404.html"):
        parser = _Links()
        parser.feed(page.read_text())
        found += [(page, tag, attr, value) for tag, attr, value in parser.found]
    return found


def test_the_built_site_navigates_from_its_files(site):
    """Opened from the files (file://, a zip), a link to a folder shows the folder's listing, not its page: every
    link between pages names a page's file, and none leaves the site (../shared/ is not in a clone)."""
    pages = sorted(site.glob("*.html"))
    assert {p.stem for p in DOCS.glob("*.md")} <= {p.stem for p in pages}
    bad = []
    for page, tag, attr, value in _addresses(site):
        parts = urlsplit(value)
        if parts.scheme or parts.netloc or not parts.path:  # https:, mailto:, data:; #anchor on the page itself
            continue
        target = (page.parent / unquote(parts.path)).resolve()
        if not target.is_relative_to(site.resolve()):
            bad.append(f"{page.name}: <{tag} {attr}={value}> leaves the site")
        elif not target.is_file():
            bad.append(f"{page.name}: <{tag} {attr}={value}> is {'a folder' if target.is_dir() else 'missing'}")
    assert not bad, bad
    index = (site / "index.html").read_text()
    assert 'href="quickstart.html"' in index and 'href="architecture.html"' in index  # the nav and the design page


def test_the_built_site_loads_nothing_from_elsewhere(site):
    """Scripts, styles, images and fonts come from the site itself: it works offline and tells no one it is read.
    (Links a reader clicks, to PyPI or a paper, may go anywhere.)"""
    loaded = [(page.name, value) for page, tag, attr, value in _addresses(site)
              if (attr == "src" or tag == "link") and urlsplit(value).scheme in ("http", "https")]
    assert not loaded, loaded


def test_the_built_site_has_search_that_works_from_the_files(site):
    """The search index holds every page, as JSON (fetched over http) and as a script (file://, where a browser
    fetches nothing: material's offline plugin), and each page loads the Web Worker shim the search runs in over
    file:// from the site itself."""
    index = json.loads((site / "search" / "search_index.json").read_text())
    pages = {doc["location"].partition("#")[0] for doc in index["docs"]}
    assert {f"{p.stem}.html" for p in DOCS.glob("*.md")} - {"index.html"} <= pages
    script = (site / "search" / "search_index.js").read_text()
    assert json.loads(script.removeprefix("var __index = ")) == index
    sections = {doc["location"] for doc in index["docs"]}
    assert "app.html#cold-start" in sections  # a section of a page is found by its own heading
    shim = [value for page, tag, attr, value in _addresses(site) if page.name == "app.html" and tag == "script"
            and attr == "src" and "iframe-worker" in value]
    assert shim and (site / shim[0]).is_file()
    assert "window.Worker=" in (site / shim[0]).read_text()
