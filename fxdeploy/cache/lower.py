"""``cached_lower``: look up, build on a miss, store. What ``fxdeploy.lower`` calls when caching.

On a hit the artifact is loaded straight from the cache entry (already hash-checked by the
lookup). A plain load rebuilds outputs from the manifest's JSON tree (dicts, lists, tuples).
``in_process_loader`` gives back what an uncached ``lower()`` returns (ModelOutput, namedtuple,
a substitution's ``unpack``): the miss stores the output TreeSpec with ``treespec_dumps`` beside
the artifact, and the hit reads it with ``treespec_loads``, which only resolves types already
registered with pytree in this process and never imports or unpickles. Where that is impossible
(unregistered dataclass outputs need an instance as a template) the hit runs the model eagerly
once instead: one forward pass, ~1 s for ResNet-50 on a busy 2-core machine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fxdeploy.artifact import structure
from fxdeploy.artifact.manifest import Manifest
from fxdeploy.cache.fingerprint import UncacheableError
from fxdeploy.cache.store import DEFAULT_MAX_BYTES, ArtifactCache, read_structure
from fxdeploy.capture import substitution
from fxdeploy.deployed import Deployed
from fxdeploy.errors import ArtifactError
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)

Loader = Callable[[Path, dict[str, Any]], Deployed]
_OPEN: dict[tuple[Path, int], ArtifactCache] = {}


def open_cache(cache_dir: str | os.PathLike[str] | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> ArtifactCache:
    """One ArtifactCache per (root, max_bytes) in a process, so its ``stats`` add up across calls."""
    cache = ArtifactCache(cache_dir, max_bytes)
    return _OPEN.setdefault((cache.root, max_bytes), cache)


def cached_lower(
    target: str,
    key_parts: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
    build: Callable[[], Deployed],
    settings_dict: Mapping[str, Any],
    cache_dir: str | os.PathLike[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    load: Loader | None = None,
) -> tuple[Deployed, bool]:
    """(Deployed, hit). The cache never makes lowering fail: its errors fall back to ``build``.

    ``key_parts`` may be a callable (e.g. ``lambda: model_parts(...)``), so that a model the
    fingerprint cannot read (sparse or quantized weights) is lowered uncached instead of failing.
    """
    cache = open_cache(cache_dir, max_bytes)
    try:
        parts = key_parts() if callable(key_parts) else key_parts
        key = cache.key(target=target, settings=settings_dict, parts=parts)
    except UncacheableError as exc:
        logger.warning("cache: lowering uncached: %s", exc)
        return build(), False
    found = cache.lookup(key)
    if found is not None:
        try:
            return (load or load_artifact)(*found), True
        except (ArtifactError, OSError) as exc:
            logger.warning("cache entry %s could not be loaded, rebuilding: %s", found[0], exc)
            cache.stats.hits -= 1
            cache.stats.misses += 1
            cache.discard(key)
    deployed = build()
    try:
        cache.put(key, deployed, structure=structure_record(deployed))
    except (ArtifactError, OSError) as exc:
        logger.warning("cache: could not store %s: %s", key[:12], exc)
    return deployed, False


def load_artifact(
    path: Path,
    manifest: Manifest,
    *,
    out_spec: pytree.TreeSpec | None = None,
    dataclass_template: Any = None,
    unpacks: list[Callable[[Any], Any]] | None = None,
) -> Deployed:
    """A Deployed over an already validated artifact (no second hash pass over the files)."""
    from fxdeploy.targets import get_target

    chosen = get_target(manifest["target"])
    chosen.require()
    try:
        settings = Settings.from_manifest(manifest["settings"])
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"{path}: settings: {exc}") from exc
    executor = chosen.load(path, manifest, settings)
    return Deployed(
        executor, manifest, path, out_spec=out_spec, dataclass_template=dataclass_template, unpacks=unpacks
    )


def in_process_loader(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    substitutions: list[substitution.Substitution],
) -> Loader:
    """A loader that gives the hit the same output types as an uncached ``lower()``."""

    def load(path: Path, manifest: Manifest) -> Deployed:
        out_spec, template = _stored_structure(path), None
        if out_spec is None:
            out_spec, template = eager_structure(model, args, kwargs, substitutions)
        expected = sum(1 for leaf in manifest["output_leaves"] if leaf["kind"] != "hidden")
        if out_spec.num_leaves != expected:
            raise ArtifactError(
                f"{path}: the model's eager output has {out_spec.num_leaves} leaves, the cached artifact "
                f"describes {expected}"
            )
        applied = set(manifest["info"].get("substitutions") or [])
        unpacks = [s.unpack for s in substitutions if s.name in applied and s.unpack is not None]
        return load_artifact(path, manifest, out_spec=out_spec, dataclass_template=template, unpacks=unpacks)

    return load


def structure_record(deployed: Deployed) -> dict[str, Any] | None:
    """JSON for the side file: the TreeSpec, unless only an eager run can rebuild it."""
    out_spec = getattr(deployed, "_out_spec", None)  # ask: a public Deployed.out_spec would do
    if out_spec is None or getattr(deployed, "_template", None) is not None:
        return None
    try:
        return {"treespec": pytree.treespec_dumps(out_spec)}
    except Exception as exc:  # noqa: BLE001 - a type pytree cannot serialize: the hit runs eagerly
        logger.info("cache: output structure not serializable (%s); a hit will run the model once", exc)
        return None


def _stored_structure(path: Path) -> pytree.TreeSpec | None:
    record = read_structure(path)
    if not record or not isinstance(record.get("treespec"), str):
        return None
    try:
        return pytree.treespec_loads(record["treespec"])
    except Exception as exc:  # noqa: BLE001 - e.g. the output type is not registered in this process
        logger.info("cache: stored output structure unusable (%s); running the model once", exc)
        return None


def eager_structure(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None,
    substitutions: list[substitution.Substitution],
) -> tuple[pytree.TreeSpec, Any]:
    """The output TreeSpec (and dataclass template) that capture would record, from one forward."""
    from fxdeploy.capture import eval_mode

    with eval_mode(model), torch.no_grad(), substitution.on_instances(model, substitutions):
        eager = model(*args, **dict(kwargs or {}))
    template = eager if structure.has_unregistered_dataclass(eager) else None
    plain = structure.dataclasses_to_dicts(eager) if template is not None else eager
    return pytree.tree_structure(plain), template
