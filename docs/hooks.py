"""MkDocs hooks: the site is the repository's own Markdown, with its links as written for the repository;
and a Griffe extension for the API reference (:class:`SphinxRoles`).

The home page is ``README.md``; ``docs/*.md`` are the guides; ``bench/`` (its README, the reports and their
charts) is published under ``bench/``. A page's relative links are written for the repository
(``README.md`` links to ``docs/tuning.md``, ``docs/benchmarks.md`` to ``../bench/README.md``): each is
resolved there and pointed at the page its target became. A link to a file the site does not publish is
left as it is, so ``mkdocs build --strict`` still fails on a broken one; so does a link whose target is
not in the repository, which would be broken there.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
#: The repository's README is the site's home page.
HOME = "README.md"
#: Folders outside docs/ that the site publishes at the same path, and the files it takes from them.
PUBLISHED = ("bench",)
SUFFIXES = (".md", ".png", ".svg")

# Inline links and images ``[text](target "title")``, and reference definitions ``[id]: target``.
_INLINE = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_REFERENCE = re.compile(r"^( {0,3}\[[^\]]+\]:\s*)(\S+)", re.MULTILINE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# A warning here fails ``mkdocs build --strict``, as MkDocs' own do.
log = logging.getLogger("mkdocs.hooks.links")


def _site_uri(repo_path: str) -> str | None:
    """The page (or file) of the site that a repository file is, or None when the site does not publish it."""
    if repo_path == HOME:
        return "index.md"
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/") :]
    if repo_path.split("/", 1)[0] in PUBLISHED:
        return repo_path
    return None


def _repo_path(site_uri: str) -> str:
    """The repository file a page of the site comes from."""
    if site_uri == "index.md":
        return HOME
    if site_uri.split("/", 1)[0] in PUBLISHED:
        return site_uri
    return "docs/" + site_uri


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "index.md", abs_src_path=str(ROOT / HOME)))
    for folder in PUBLISHED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES:
                files.append(File.generated(config, path.relative_to(ROOT).as_posix(), abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    src_uri = page.file.src_uri
    repo_dir = posixpath.dirname(_repo_path(src_uri))
    site_dir = posixpath.dirname(src_uri)

    def rewrite(target: str) -> str:
        if target.startswith(("#", "/")) or _SCHEME.match(target):
            return target
        path, hash_, anchor = target.partition("#")
        repo_target = posixpath.normpath(posixpath.join(repo_dir, path))
        if not (ROOT / repo_target).exists():
            log.warning("%s links to %r, which is not in the repository (%s)", _repo_path(src_uri), target, repo_target)
            return target
        site = _site_uri(repo_target)
        if site is None or files.get_file_from_path(site) is None:
            return target
        return posixpath.relpath(site, site_dir or ".") + hash_ + anchor

    markdown = _INLINE.sub(lambda m: m.group(1) + rewrite(m.group(2)) + m.group(3), markdown)
    return _REFERENCE.sub(lambda m: m.group(1) + rewrite(m.group(2)), markdown)


_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj):`(~?)([^`]+)`")


class SphinxRoles(griffe.Extension):
    """The docstrings are written with Sphinx's roles: the reference shows ``:class:`~a.b.C``` as `C` and
    ``:func:`a.b.f``` as `a.b.f`, in code, as Sphinx would (mkdocstrings reads them as Markdown)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)


def _code(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"
