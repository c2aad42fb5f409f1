"""The documentation as the tests read it: README.md, the front door, and the pages of the
site under docs/ (mkdocs.yml). A test that runs or checks a snippet of the documentation
finds it here by what it holds, not by the page it sits on, so that a page can move
without the test going quiet: a block a test looks for must be found exactly once."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"


def pages() -> list[Path]:
    """README.md and every Markdown page of the site, in a stable order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def page(name: str) -> str:
    """The text of one page of the site, by its path under docs/."""
    return (DOCS / name).read_text()


def code_blocks(lang: str) -> list[str]:
    """Every fenced block of `lang` on every page (`\\w*` for blocks of any language)."""
    return [block for p in pages()
            for block in re.findall(rf"```{lang}\n(.*?)```", p.read_text(), re.S)]


def the_block(lang: str, marker: str) -> str:
    """The one ```lang block that contains `marker`, on whichever page holds it."""
    __tracebackhide__ = True
    found = [(p, block) for p in pages()
             for block in re.findall(rf"```{lang}\n(.*?)```", p.read_text(), re.S)
             if marker in block]
    where = [str(p.relative_to(REPO)) for p, _ in found]
    assert len(found) == 1, f"expected one ```{lang} block with {marker!r} in the docs: {where}"
    return found[0][1]


def sections(text: str) -> dict[str, str]:
    """A page's sections by heading text (any level), each up to the next heading; the
    text before the first heading under ''. Lines inside code blocks are not headings."""
    out: dict[str, list[str]] = {"": []}
    current, fence = "", False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        heading = None if fence else re.match(r"#{1,6} (.+)$", line)
        if heading:
            current = heading.group(1).strip()
            out[current] = []
        else:
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}
