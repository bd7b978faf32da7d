"""Small helpers shared by passes: fake-tensor metadata, unbacked sizes, call sites."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._guards import detect_fake_mode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp


class MetaError(ValueError):
    """A rewritten graph whose shapes cannot be recomputed: an op refuses its inputs' types or
    shapes. The message names the op and its call site."""


class _Propagation(FakeTensorProp):
    """FakeTensorProp that says which node failed, in one line rather than torch's traceback."""

    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            return super().run_node(n)
        except Exception as exc:  # noqa: BLE001 - re-raised with the node that failed
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise MetaError(f"{call_site(n)}: {n.target} fails on the rewritten graph ({reason})") from exc


def refresh_meta(gm: torch.fx.GraphModule) -> None:
    """Recompute every node's meta['val'] after a rewrite, in the capture's own fake mode. A
    failure is a ``MetaError`` naming the node; torch's own log of it is held back (the console
    stays quiet)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = [n.meta.get("val") for n in placeholders]
    mode = detect_fake_mode(values)
    if mode is None:
        raise ValueError("graph inputs carry no fake tensors; cannot recompute shapes")
    gm.recompile()
    propagation = _Propagation(gm, mode=mode)
    propagation.extra_traceback = False  # the MetaError names the node
    with warnings.catch_warnings(), _held_back("torch._subclasses.fake_tensor"), enable_python_dispatcher():
        # torchvision 0.29's fake nms calls a renamed torch API
        warnings.filterwarnings("ignore", message=".*create_unbacked_symint.*is deprecated", category=FutureWarning)
        propagation.propagate_dont_convert_inputs(*values)


@contextlib.contextmanager
def _held_back(name: str) -> Iterator[None]:
    """torch's fake tensors log a failed meta kernel with its traceback at error level, before
    the error reaches the caller: the caller reports it instead."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def fill_meta(new: list[torch.fx.Node], fresh_sizes: bool = False) -> None:
    """meta['val'] of inserted nodes, in order, from their inputs' fake values, in the capture's
    fake mode. Cheaper than ``refresh_meta``, and it cannot trip on ops elsewhere in the graph (a
    whole-graph propagation does on DETR at a dynamic H/W). The Python dispatcher is on, as in
    torch.export's trace: without it an op with no symbolic meta kernel (``constant_pad_nd``) runs
    its C++ kernel, which reads the sizes as ints and fixes a dynamic batch at the example's.
    ``fresh_sizes``: the ops may name a data-dependent size anew (torch 2.11 does for a slice), which
    the caller binds; the shape env is not to wait for an op of the graph to return it."""
    values = [a.meta.get("val") for n in new for a in n.all_input_nodes]
    mode = detect_fake_mode(values)
    fresh = mode.shape_env.ignore_fresh_unbacked_symbols() if fresh_sizes and mode and mode.shape_env else None
    with mode or contextlib.nullcontext(), enable_python_dispatcher(), fresh or contextlib.nullcontext():
        for node in new:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta["val"])
            node.meta["val"] = node.target(*args, **kwargs)


def replaced_by(new: list[torch.fx.Node], node: torch.fx.Node) -> None:
    """The nodes ``new`` inserted in place of ``node``: ``node``'s meta (its call site, not its
    value) on each, then their values (``fill_meta``)."""
    for inserted in new:
        inserted.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    fill_meta(new)


def unbacked_symbols(value: Any) -> set[str]:
    """Names of data-dependent sizes (u0, u1...) in a fake tensor's shape."""
    if not isinstance(value, torch.Tensor):
        return set()
    return set().union(*(size_symbols(size) for size in value.shape))


def size_symbols(size: Any) -> set[str]:
    """Data-dependent symbols in one size: u3 for ``u3`` and for ``Min(100, u3)``."""
    if not isinstance(size, torch.SymInt):
        return set()
    return {str(s) for s in size.node.expr.free_symbols if str(s).startswith("u")}


# torch's and fxdeploy's own files: ``nn.Embedding.forward`` or the wrapper of ``fxdeploy.ops.nms``
# is not where a user can change anything
_LIBRARIES = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)


def call_site(node: torch.fx.Node) -> str:
    """The user's file:line that produced a node, from the trace's stack: the innermost frame
    outside torch and fxdeploy."""
    trace = node.meta.get("stack_trace") or ""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip().startswith("File ")]
    own = [line for line in lines if not any(f'"{library}' in line for library in _LIBRARIES)]
    return (own or lines)[-1] if lines else f"node {node.name}"


def inherit_stack_traces(after: torch.fx.Node, node: torch.fx.Node, known: set[torch.fx.Node]) -> None:
    """The nodes a rewrite of ``node`` inserted right after ``after`` (those not in ``known``) take
    ``node``'s stack trace, so that an error naming one names the line of the op it replaces; they
    join ``known``. Where ``node`` has none (the graph's output), each takes the line of a value it
    is computed from, else of one computed from it (the padding zeroed off a returned tensor)."""
    inserted = []
    current = after.next
    while current not in known and current.op != "root":
        inserted.append(current)
        known.add(current)
        current = current.next
    inserted = [n for n in inserted if not n.meta.get("stack_trace")]
    trace = node.meta.get("stack_trace")
    for new in inserted:
        new.meta["stack_trace"] = trace or _first_trace(new.all_input_nodes)
    for new in reversed(inserted):
        if not new.meta["stack_trace"]:
            new.meta["stack_trace"] = _first_trace(list(new.users))


def _first_trace(nodes: list[torch.fx.Node]) -> str | None:
    return next((t for n in nodes if (t := n.meta.get("stack_trace"))), None)


def stamp_inserted(gm: torch.fx.GraphModule, known: set[torch.fx.Node]) -> None:
    """Nodes a pass inserted (not in ``known``) with no stack trace take that of the node they were
    inserted before, the op they serve (a cast before its reader) or replace."""
    waiting: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        if node not in known:
            if node.op == "call_function" and not node.meta.get("stack_trace"):
                waiting.append(node)
            continue
        trace = node.meta.get("stack_trace")
        if trace:
            for new in waiting:
                new.meta["stack_trace"] = trace
            waiting.clear()


def is_op(node: Any, *names: str) -> bool:
    """Match an OpOverload by its qualified name ('fxdeploy.nms.default'), without importing it."""
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and str(node.target) in names


def attribute(gm: torch.fx.GraphModule, node: object) -> object:
    """What a ``get_attr`` node reads from ``gm`` (a parameter, a buffer, a folded constant, by its
    dotted name); None for any other node, or a name ``gm`` lacks."""
    if not isinstance(node, torch.fx.Node) or node.op != "get_attr":
        return None
    value: object = gm
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    return value


def written_in_place(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """Tensors written in place, through any views of them (a batch buffer that images are copied
    into): they are the written values, not constants."""
    written: set[torch.fx.Node] = set()
    for node in graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None or not schema.is_mutable or not node.args:
            continue
        base = node.args[0]
        while isinstance(base, torch.fx.Node) and base not in written:
            written.add(base)
            returns = getattr(getattr(base.target, "_schema", None), "returns", ())
            aliases = base.op == "call_function" and returns and returns[0].alias_info is not None
            base = base.args[0] if aliases and base.args else None
    return written
