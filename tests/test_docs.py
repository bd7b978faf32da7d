"""Every document a user is pointed to is in the repository: each relative link in README.md,
docs/ and benchmarks/README.md resolves to a file or folder inside it, and no document or source
file names the design folder outside it (``../shared/``) or the NMS contract by its old name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from tests.helpers import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
OUTSIDE = re.compile(r"\.\./shared/|NMS_SPEC|PERF\.md")
CODE_PATH = re.compile(r"`(\.\.?/[^`\s]+)`")


def _relative_links(document: Path) -> list[str]:
    text = document.read_text(encoding="utf-8")
    links = [m.group(1) for m in LINK.finditer(text)] + [m.group(1) for m in CODE_PATH.finditer(text)]
    return [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", link)]


def test_the_documents_link_to_each_other() -> None:
    """The link check below sees links at all (a broken pattern would pass on nothing)."""
    assert "docs/nms-spec.md" in _relative_links(ROOT / "README.md")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(document: Path) -> None:
    broken = []
    for link in _relative_links(document):
        target = (document.parent / link.split("#")[0]).resolve()
        if not target.is_relative_to(ROOT.resolve()) or not target.exists():
            broken.append(link)
    assert broken == [], f"{document.relative_to(ROOT)} links outside the repository or to nothing: {broken}"


def test_no_file_names_the_design_folder_outside_the_repository() -> None:
    files = [ROOT / name for name in ("README.md", "Makefile", "pyproject.toml")]
    for folder in ("fxdeploy", "tests", "examples", "benchmarks", "docs"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md", ".toml")]
    offenders = [
        str(path.relative_to(ROOT)) for path in files
        if path.name != "test_docs.py" and OUTSIDE.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], f"name docs/nms-spec.md or docs/performance.md instead, in {offenders}"


def test_the_readme_lists_every_torch_compile_backend() -> None:
    """Each backend pyproject.toml registers with torch (and so each a user can name) is in the README."""
    backends = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["torch_dynamo_backends"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(backends) >= 5
    assert [name for name in backends if f"`{name}`" not in readme] == []
