"""ArtifactCache: saved artifacts in a directory, one per key, evicted least-recently-used by size.

Each entry is an ordinary artifact directory named by its key, written with ``artifact.save``
(staging directory, then an atomic rename), so a reader sees a whole entry or none. A hit is
validated with ``artifact.read_manifest`` (schema and every file's sha256); a corrupt entry is
deleted and counted as a miss. A hit touches the entry's mtime, which is the LRU order.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fxdeploy import artifact
from fxdeploy.cache.key import KEY_FORMAT, cache_key, default_root
from fxdeploy.deployed import Deployed
from fxdeploy.errors import ArtifactError

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 10 * 2**30
_KEY = re.compile(r"^[0-9a-f]{64}$")
_STALE_SECONDS = 3600.0
STRUCTURE = "cache-structure.json"
"""Beside the artifact's own files: the in-process output structure (see ``cache.lower``)."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    stores: int = 0
    evictions: int = 0
    corrupt: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ArtifactCache:
    """A size-bounded, content-addressed store of artifacts under ``root``."""

    def __init__(self, root: str | os.PathLike[str] | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError(f"cache max_bytes must be > 0, got {max_bytes}")
        self.root = Path(root if root is not None else default_root()).expanduser().absolute() / f"v{KEY_FORMAT}"
        self.max_bytes = max_bytes
        self.stats = CacheStats()

    def key(self, *, target: str, settings: Mapping[str, Any], parts: Mapping[str, Any]) -> str:
        """sha256 of everything that decides the artifact (see ``cache.key.cache_key``)."""
        return cache_key(target=target, settings=settings, parts=parts)

    def path(self, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"cache key must be 64 lowercase hex digits, got {key!r}")
        return self.root / key

    def get(self, key: str) -> Path | None:
        found = self.lookup(key)
        return found[0] if found else None

    def lookup(self, key: str) -> tuple[Path, dict[str, Any]] | None:
        """(path, validated manifest) on a hit; None on a miss. A corrupt entry is deleted."""
        path = self.path(key)
        if not path.is_dir():
            self.stats.misses += 1
            logger.info("cache miss %s (%s)", key[:12], self.root)
            return None
        try:
            root, manifest = artifact.read_manifest(path)
        except ArtifactError as exc:
            logger.warning("cache entry %s is corrupt, deleting it: %s", path, exc)
            self.stats.corrupt += 1
            self.stats.misses += 1
            self.discard(key)
            return None
        try:
            os.utime(path)
        except FileNotFoundError:  # evicted by another process since the check
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        logger.info("cache hit %s (%s)", key[:12], path)
        return root, manifest

    def put(
        self, key: str, source: Deployed | str | os.PathLike[str], structure: Mapping[str, Any] | None = None
    ) -> Path | None:
        """Store an artifact atomically; returns its path, or None if it alone exceeds max_bytes.

        ``structure`` (JSON) goes into a side file after the artifact is in place; an entry
        without it is still whole, its loader just has to work the structure out again.
        """
        dest = self.path(key)
        if isinstance(source, Deployed):
            source.save(dest)
        else:
            root, manifest = artifact.read_manifest(source)
            artifact.save(manifest, root, dest)
        if structure is not None:
            partial = dest / f".{STRUCTURE}.{uuid.uuid4().hex[:8]}"
            partial.write_text(json.dumps(structure, sort_keys=True))
            os.replace(partial, dest / STRUCTURE)
        self.stats.stores += 1
        logger.info("cache store %s (%s)", key[:12], dest)
        self.evict(keep=key)
        return dest if dest.is_dir() else None

    def discard(self, key: str) -> None:
        _remove(self.path(key))

    def entries(self) -> list[tuple[str, int, float]]:
        """(key, bytes, mtime) of every entry, oldest first."""
        rows = []
        if not self.root.is_dir():
            return rows
        for entry in os.scandir(self.root):
            if _KEY.match(entry.name) and entry.is_dir(follow_symlinks=False):
                try:
                    size = sum(f.stat().st_size for f in os.scandir(entry.path) if f.is_file())
                    rows.append((entry.name, size, entry.stat().st_mtime))
                except FileNotFoundError:  # removed by another process meanwhile
                    continue
        return sorted(rows, key=lambda row: row[2])

    def size(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def evict(self, keep: str | None = None) -> list[str]:
        """Delete least-recently-used entries until the total fits; ``keep`` goes last."""
        self._clean_stale()
        rows = self.entries()
        total = sum(size for _, size, _ in rows)
        ordered = [r for r in rows if r[0] != keep] + [r for r in rows if r[0] == keep]
        evicted = []
        for key, size, _ in ordered:
            if total <= self.max_bytes:
                break
            if key == keep:
                logger.warning("cache: artifact %s (%d bytes) exceeds the cache limit of %d bytes; not kept",
                               key[:12], size, self.max_bytes)
            _remove(self.root / key)
            total -= size
            evicted.append(key)
        self.stats.evictions += len(evicted)
        if evicted:
            logger.info("cache evicted %d entr%s, %d bytes left", len(evicted), "y" if len(evicted) == 1 else "ies",
                        total)
        return evicted

    def _clean_stale(self) -> None:
        """Staging and trash directories left by a process that died mid-write."""
        if not self.root.is_dir():
            return
        now = time.time()
        for entry in os.scandir(self.root):
            if entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                try:
                    if now - entry.stat().st_mtime > _STALE_SECONDS:
                        shutil.rmtree(entry.path, ignore_errors=True)
                except FileNotFoundError:
                    continue


def read_structure(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((path / STRUCTURE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _remove(path: Path) -> None:
    """Rename out of the way first, so readers see the entry whole or gone, then delete."""
    trash = path.with_name(f".trash-{path.name[:12]}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)
