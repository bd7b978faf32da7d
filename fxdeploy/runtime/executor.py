"""The Executor contract: ``execute(feeds) -> outputs`` runs the engine and nothing else, timed."""

from __future__ import annotations

import abc
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from fxdeploy.settings import Settings


@dataclass(frozen=True)
class Stats:
    """Latency of execute calls in milliseconds (over the most recent ``window`` samples)."""

    count: int
    mean: float
    median: float
    p90: float
    p99: float
    min: float
    max: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class TimingRecorder:
    """A bounded ring of samples, so a long-running service does not grow without limit."""

    def __init__(self, window: int = 65536) -> None:
        self._samples = [0] * window  # a list: storing an int is ~10x cheaper than into a numpy array
        self._window = window
        self._count = 0
        self._lock = threading.Lock()

    def record(self, nanoseconds: int) -> None:
        with self._lock:
            self._samples[self._count % self._window] = nanoseconds
            self._count += 1

    def stats(self) -> Stats:
        with self._lock:
            count = self._count
            samples = np.array(self._samples[: min(count, self._window)], dtype=np.float64) / 1e6
        if count == 0:
            nan = float("nan")
            return Stats(0, nan, nan, nan, nan, nan, nan)
        p50, p90, p99 = np.percentile(samples, [50, 90, 99])
        return Stats(
            count, float(samples.mean()), float(p50), float(p90), float(p99),
            float(samples.min()), float(samples.max()),
        )

    def reset(self) -> None:
        with self._lock:
            self._count = 0


class Executor(abc.ABC):
    """Runs one lowered artifact: the contract a target's ``load`` returns (public, versioned).

    A subclass implements ``run(feeds) -> outputs``: tensors by input name in, tensors by output
    name out (the manifest's names), contiguous CPU tensors of the manifest's dtypes, already
    validated by ``Deployed``. ``run`` only runs the engine: no validation, no conversion a caller
    could do, since ``execute`` times it. It may be called from several threads at once unless
    ``thread_safe`` is False. Optional: ``run_images`` (several per-image requests of one call at
    once) and ``synchronize`` (a device engine waits for its work, inside the timed region).
    """

    thread_safe: bool = True
    """False where concurrent ``run`` calls into the engine are unsafe; Deployed then serializes them."""

    def __init__(self) -> None:
        self.timings = TimingRecorder()

    def execute(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.check(feeds)
        start = time.perf_counter_ns()
        outputs = self.run(feeds)
        self.synchronize()
        self.timings.record(time.perf_counter_ns() - start)
        return outputs

    def execute_images(self, images: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        """A per-image artifact's images of one call, results in order, timed as one call."""
        for feeds in images:
            self.check(feeds)
        start = time.perf_counter_ns()
        outputs = self.run_images(images) if len(images) > 1 else [self.run(feeds) for feeds in images]
        self.synchronize()
        self.timings.record(time.perf_counter_ns() - start)
        return outputs

    def run_images(self, images: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        """One after the other; engines that run several requests at once override this."""
        return [self.run(feeds) for feeds in images]

    @property
    def stats(self) -> Stats:
        return self.timings.stats()

    def check(self, feeds: dict[str, torch.Tensor]) -> None:  # noqa: B027 - an optional hook
        """The engine's own input rules (a TensorRT profile's bounds), raising InputError. Called
        before the timed region, so validation is never counted as inference time."""

    @abc.abstractmethod
    def run(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...

    def synchronize(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Engines that run asynchronously on a device wait here, inside the timed region."""


MAX_STREAMS = 4
"""Images of one call run at once by default: more sessions or streams cost memory, and gain
little once each has a single thread."""


def stream_count(settings: Settings, images: int) -> int:
    """How many of ``images`` run at once: ``settings.image_streams``, or one per thread (at most
    MAX_STREAMS); never more than the images or the threads, since each stream needs a thread."""
    wanted = settings.image_streams or min(settings.threads, MAX_STREAMS)
    return max(1, min(wanted, images, settings.threads))


def to_torch(array: np.ndarray) -> torch.Tensor:
    """A runtime's output array as a tensor, without a copy unless the array is read-only."""
    return torch.from_numpy(array) if array.flags.writeable else torch.from_numpy(array.copy())
