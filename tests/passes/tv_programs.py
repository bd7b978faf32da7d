"""Small programs for translation validation, generated from a grammar of the constructs that make a
pass wrong when it is wrong about aliasing or sizes.

A program is an ``nn.Module`` written as source (so a failure prints it, and ``call_site`` names its
lines): views (view, reshape, permute, transpose, unsqueeze, flatten, select, slice, expand),
copies (clone, contiguous, same-dtype casts), in-place writes (``y[:, i] = ...``, ``y[idx] += ...``,
``x.add_(...)``, ``index_put_`` at computed or boolean indices), boolean masks (``x[mask]``,
``nonzero``, ``where(cond)``), ``where``, ``cat``, ``topk``, ``sort``/``argsort``, arithmetic,
casts, reductions, pooling, attention, padded copies, constant grids and, now and then, an NMS
(``fxdeploy.ops.nms``/``batched_nms``).

Each statement is drawn, then run on the example inputs (the *probe*): a statement eager PyTorch
refuses (a ``view`` of a tensor a permute made non-contiguous, a write into an expanded tensor) is
dropped, so every program runs eagerly. Statements on rows selected by a mask are valid at any row
count (``topk(x, min(n, k))``, ``x[:k]``), so the program runs on other inputs too. Sort keys and
the keys of selected indices are tie-free (continuous values): an index output where two keys tie
has no single right answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import linecache
import re
import types
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

import fxdeploy.ops

BATCH = ("batch", 1, 8)
"""A dynamic batch's declared range (``lower``'s ``(name, min, max)``)."""
THRESHOLDS = (-0.5, 0.0, 0.3, 0.8)


@dataclasses.dataclass(frozen=True)
class Input:
    name: str
    shape: tuple[int, ...]
    dynamic: bool = False
    """Whether dim 0 is a dynamic batch."""


@dataclasses.dataclass(frozen=True)
class Program:
    body: tuple[str, ...]
    """The lines of ``forward``, its ``return`` last."""
    inputs: tuple[Input, ...]
    weights: tuple[tuple[str, tuple[int, ...]], ...] = ()
    detections: tuple[tuple[int, str], ...] = ()
    """(output index, role) of the outputs that are an NMS's kept rows: "boxes", "scores", "labels"
    or a field. Their order is an NMS's, defined only up to equal scores: compared as a set."""
    decisions: bool = False
    """Whether values decide anything (masks, sorts, NMS, comparisons, integer casts): in fp16 a value
    that rounds across a threshold may decide otherwise, and no tolerance covers that."""

    @property
    def source(self) -> str:
        lines = ["class Program(torch.nn.Module):", "    def __init__(self):", "        super().__init__()"]
        if self.weights:
            lines.append("        g = torch.Generator().manual_seed(0)")
        for name, shape in self.weights:
            fan_in = max(1, int(torch.tensor(shape[1:]).prod()))
            scale = f"{fan_in ** 0.5:.3f}"
            lines.append(f"        self.{name} = torch.nn.Parameter(torch.randn({shape}, generator=g) / {scale})")
        args = ", ".join(i.name for i in self.inputs)
        lines.append(f"\n    def forward(self, {args}):")
        lines += [f"        {line}" for line in self.body]
        return "\n".join(lines) + "\n"

    def module(self) -> torch.nn.Module:
        """The program as a module; its source is registered with linecache, so a traceback or a
        pass's ``call_site`` shows the line."""
        source = self.source
        filename = f"<program {hashlib.sha1(source.encode()).hexdigest()[:10]}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = namespace_for_programs()
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the program under test
        return namespace["Program"]().eval()

    def dynamic_shapes(self) -> dict[str, dict[int, tuple[str, int, int]]] | None:
        dynamic = {i.name: {0: BATCH} for i in self.inputs if i.dynamic}
        return dynamic or None

    def example(self, seed: int = 0, sizes: list[tuple[int, ...]] | None = None) -> tuple[torch.Tensor, ...]:
        """Inputs drawn from N(0, 1) by ``seed``, at ``sizes`` (the inputs' own shapes by default)."""
        generator = torch.Generator().manual_seed(seed)
        shapes = sizes or [i.shape for i in self.inputs]
        return tuple(torch.randn(shape, generator=generator) for shape in shapes)


def namespace_for_programs() -> dict[str, Any]:
    return {"torch": torch, "F": torch.nn.functional, "ops": fxdeploy.ops}


@dataclasses.dataclass
class Var:
    name: str
    value: torch.Tensor
    root: str
    """The variable whose storage it may view: an input's name, or its own for a fresh tensor."""
    rows: str | None = None
    """The selection whose data-dependent count its dim 0 holds."""
    smooth: bool = True
    """Continuous values, so no ties: a safe sort key."""
    det: str | None = None
    index: int | None = None
    """For a 1-D long of distinct values: every value is below this."""

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    @property
    def float(self) -> bool:
        return self.value.is_floating_point()


@dataclasses.dataclass
class New:
    """A variable a statement makes: ``alias`` names the variable it may view (None: fresh)."""

    name: str
    alias: str | None = None
    rows: str | None = None
    smooth: bool = True
    det: str | None = None
    index: int | None = None


Statement = tuple[list[str], list[New]]


class Builder:
    """A program under construction, run statement by statement on the probe inputs."""

    def __init__(self, draw: Callable[[Any], Any], inputs: list[Input]) -> None:
        self.draw = draw
        self.inputs = inputs
        self.lines: list[str] = []
        self.weights: dict[str, torch.Tensor] = {}
        self.module = types.SimpleNamespace(training=False)
        self.ns = {**namespace_for_programs(), "self": self.module}
        self.vars: dict[str, Var] = {}
        self.names = (f"v{i}" for i in itertools.count())
        self.selections = (f"u{i}" for i in itertools.count())
        self.detections: list[tuple[str, str]] = []
        self.decisions = False
        self.decide = True
        """Whether statements may decide by values (``Program.decisions``)."""
        probe = Program((), tuple(inputs)).example(0)
        for spec, value in zip(inputs, probe, strict=True):
            self.vars[spec.name] = Var(spec.name, value, spec.name)
            self.ns[spec.name] = value

    # -- drawing -----------------------------------------------------------------------------
    def pick(self, ok: Callable[[Var], bool]) -> Var | None:
        """A variable ``ok`` takes; a recent one half the time, so that statements chain."""
        found = [v for v in self.vars.values() if v.det is None and ok(v)]
        if len(found) > 3 and self.draw(st.booleans()):
            found = found[-3:]
        return self.draw(st.sampled_from(found)) if found else None

    def one_of(self, options: Any) -> Any:
        return self.draw(st.sampled_from(list(options)))

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))

    def new_name(self) -> str:
        return next(self.names)

    def weight(self, shape: tuple[int, ...]) -> str:
        name = f"w{len(self.weights)}"
        generator = torch.Generator().manual_seed(0)  # the values do not matter to the probe
        self.weights[name] = torch.randn(shape, generator=generator)
        setattr(self.module, name, self.weights[name])
        return f"self.{name}"

    def writable(self, var: Var) -> bool:
        return var.root not in {i.name for i in self.inputs}

    # -- running -----------------------------------------------------------------------------
    def apply(self, statement: Statement | None) -> bool:
        """Run ``statement`` on the probe; keep it where eager PyTorch takes it."""
        if statement is None:
            return False
        lines, made = statement
        try:
            with torch.no_grad():
                for line in lines:
                    exec(line, self.ns)  # noqa: S102 - the statement under construction
        except Exception:  # noqa: BLE001 - eager refuses it: the statement is dropped
            return False
        for new in made:
            value = self.ns[new.name]
            if not isinstance(value, torch.Tensor) or value.numel() > 4096:
                return False
        self.lines += lines
        for new in made:
            root = self.vars[new.alias].root if new.alias else new.name
            self.vars[new.name] = Var(new.name, self.ns[new.name], root, new.rows, new.smooth, new.det, new.index)
            if new.det is not None:
                self.detections.append((new.name, new.det))
        return True

    def wrote(self, var: Var) -> None:
        """After a write into ``var``: every variable sharing its storage may now hold ties."""
        for other in self.vars.values():
            if other.root == var.root:
                other.smooth = False
                other.index = None

    def finish(self) -> Program:
        """Return what no later statement reads, so that little is dead code (which torch.export
        would drop), and what is read too, up to eight, so that a pass that changes a value a later
        write should not reach (a clone's source) shows it; then the NMS's kept rows, if any."""
        read: set[str] = set()
        for line in self.lines:
            target, assigned, value = line.partition(" = ")
            names = re.findall(r"\bv\d+\b", target)
            defines = assigned and re.fullmatch(r"[\w, ]+", target)
            read |= set(re.findall(r"\bv\d+\b", value)) | (set() if defines else set(names[1:]))
        made = [v for v in self.vars.values() if v.det is None and v.name not in {i.name for i in self.inputs}]
        unread = [v.name for v in made if v.name not in read][-6:]
        rest = [v.name for v in made if v.name not in unread]
        also = rest[len(rest) - min(len(rest), 8 - len(unread)):]
        outputs = [v.name for v in made if v.name in unread or v.name in also]
        if not outputs:
            outputs = [self.inputs[0].name]
        detections = []
        for name, role in self.detections:
            detections.append((len(outputs), role))
            outputs.append(name)
        body = (*self.lines, f"return ({', '.join(outputs)},)")
        weights = tuple((name, tuple(w.shape)) for name, w in self.weights.items())
        return Program(body, tuple(self.inputs), weights, tuple(detections), self.decisions)


def index_expr(var: str, dim: int, item: str, rank: int) -> str:
    """``var[:, :, item]``: ``item`` at ``dim``, every other dim whole."""
    if dim == rank - 1 and rank > 2:
        return f"{var}[..., {item}]"
    return f"{var}[{', '.join([':'] * dim + [item])}]"


def shape_text(shape: list[int], free: int | None = None) -> str:
    """``2, -1, 4``: the sizes as call arguments, ``free`` (a dim) written -1."""
    return ", ".join("-1" if d == free else str(size) for d, size in enumerate(shape))


@st.composite
def inputs_strategy(draw: Callable[[Any], Any], dynamic: bool | None = None) -> list[Input]:
    """One or two inputs; a dynamic batch (dim 0 of rank 3 and 4 inputs) always, never or now and then (None)."""
    rank = draw(st.sampled_from([3, 4] if dynamic else [1, 2, 2, 3, 3, 4, 4]))
    sizes = {
        1: [(12,), (16,), (30,)],
        2: [(n, c) for n in (6, 8, 12, 24) for c in (4, 5, 6, 8)],
        3: [(b, n, c) for b in (1, 2, 3) for n in (2, 4, 6) for c in (4, 6, 8)],
        4: [(b, c, h, w) for b in (1, 2) for c in (2, 4) for h in (2, 3, 4) for w in (2, 4, 6)],
    }
    shape = draw(st.sampled_from([s for s in sizes[rank] if not dynamic or s[0] > 1]))
    batch = rank >= 3 and shape[0] > 1 and (dynamic or dynamic is None and draw(st.booleans()))
    first = Input("x0", shape, batch)
    second = draw(st.sampled_from(["none", "same", "rows"]))
    if second == "same":
        return [first, Input("x1", shape, batch)]
    if second == "rows":
        return [first, Input("x1", (draw(st.sampled_from([8, 16, 24])), 6))]
    return [first]
