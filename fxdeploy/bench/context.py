"""What every row builder gets (model, inputs, threads, a work dir) and what it returns (a Row)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fxdeploy.bench.isolated import IsolatedResult, run_isolated
from fxdeploy.settings import Settings

logger = logging.getLogger(__name__)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # exporters colour their messages; JSON and markdown should not


@dataclass
class Row:
    """One contender. ``fn`` runs it once on the shared inputs; ``adapt`` turns its raw result into
    the model's output structure. Both are timed (``timed_call``): every row delivers what eager does."""

    name: str
    kind: str
    status: str = "ok"
    reason: str | None = None
    version: str | None = None
    fn: Callable[[], Any] | None = field(default=None, repr=False)
    adapt: Callable[[Any], Any] | None = field(default=None, repr=False)
    lower_s: float | None = None
    lower_peak_rss_mb: float | None = None
    lower_base_rss_mb: float | None = None
    lower_measurement: str | None = None
    artifact_bytes: int | None = None

    def failed(self, reason: str, status: str = "failed") -> Row:
        self.status, self.reason, self.fn = status, _ANSI.sub("", reason)[:2000], None
        return self


@dataclass
class BenchContext:
    model: torch.nn.Module
    inputs: tuple[Any, ...]
    threads: int
    settings: Settings
    work: Path
    model_spec: str | None = None
    substitutions: dict[Any, Any] | None = None
    _isolation: str | None = None
    """None until tried; "ok" once a child could re-create the model; otherwise why not."""

    def isolated(self, request: dict[str, Any], name: str) -> IsolatedResult | None:
        """Run a lowering request in a fresh interpreter; None when the model cannot be sent there."""
        if self._isolation not in (None, "ok"):
            return None
        if self.substitutions and not self.model_spec:
            return None  # substitutions reach a child only through the model file's spec
        try:
            source = self._model_source()
        except Exception as exc:  # noqa: BLE001 - e.g. a model holding a lambda cannot be pickled
            self._isolation = f"cannot pickle the model: {type(exc).__name__}: {exc}"
            logger.warning("%s; lowering in-process", self._isolation)
            return None
        request = dict(request, threads=self.threads, inputs=str(self._inputs_file()), **source)
        result = run_isolated(request, self.work / f"child-{name}")
        if not result.ok and result.stage == "load":
            self._isolation = result.error
            logger.warning("cannot re-create the model in a subprocess (%s); lowering in-process", result.error)
            return None
        self._isolation = "ok"
        return result

    def unpack_for(self, applied: list[str]) -> Any:
        """The host-side unpack of the applied substitution, which ``fxdeploy.load`` needs back."""
        from fxdeploy.capture.substitution import resolve

        unpacks = [s.unpack for s in resolve(self.substitutions) if s.name in applied and s.unpack is not None]
        return unpacks[0] if len(unpacks) == 1 else None

    def _inputs_file(self) -> Path:
        path = self.work / "inputs.pt"
        if not path.exists():
            torch.save(tuple(self.inputs), path)
        return path

    def _model_source(self) -> dict[str, str]:
        if self.model_spec:
            return {"spec": self.model_spec}
        path = self.work / "model.pt"
        if not path.exists():
            torch.save(self.model, path)
        return {"model": str(path)}


class RssSampler:
    """Peak RSS of this process while a block runs, sampled every ``interval_s`` by a thread.

    The in-process fallback: spikes shorter than the interval can be missed, and memory kept from
    earlier rows is in the baseline, so it reports less than a fresh subprocess would.
    """

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.base_mb: float | None = None
        self.peak_mb: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        self.base_mb = self.peak_mb = _rss_mb()
        if self.base_mb is not None:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _sample(self) -> None:
        while not self._stop.is_set():
            rss = _rss_mb()
            if rss is not None and self.peak_mb is not None:
                self.peak_mb = max(self.peak_mb, rss)
            time.sleep(self.interval_s)


def _rss_mb() -> float | None:
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process().memory_info().rss / 2**20


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed_call(row: Row) -> Callable[[], Any]:
    """What is timed for ``row``: from the inputs to the model's output structure."""
    fn, adapt = row.fn, row.adapt
    if fn is None:
        raise ValueError(f"row {row.name!r} has no callable (status {row.status!r})")
    return fn if adapt is None else lambda: adapt(fn())
