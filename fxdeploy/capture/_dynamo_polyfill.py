"""Scoped dynamo polyfills: ``torch.compiler.substitute_in_graph`` that can be undone.

``substitute_in_graph`` registers for the life of the process. fxdeploy needs a substitution to
hold for exactly one capture, so this module removes the four entries that registration adds.
It is the only place that touches dynamo internals; a torch upgrade that moves them fails here,
loudly, in ``tests/capture/test_substitution.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch


@contextlib.contextmanager
def scoped(table: dict[Callable[..., Any], Callable[..., Any]]) -> Iterator[None]:
    registered: list[tuple[Callable[..., Any], Callable[..., Any]]] = []
    try:
        for original, replacement in table.items():
            wrapped = torch.compiler.substitute_in_graph(original, skip_signature_check=True)(
                replacement
            )
            registered.append((original, wrapped))
        yield
    finally:
        for original, wrapped in registered:
            _unregister(original, wrapped)


def _unregister(original: Callable[..., Any], wrapped: Callable[..., Any]) -> None:
    from torch._dynamo.trace_rules import _polyfilled_function_ids, get_torch_obj_rule_map
    from torch._dynamo.variables import PolyfilledFunctionVariable
    from torch._dynamo.variables.builder import VariableBuilder

    id_dispatch = VariableBuilder._id_dispatch()
    polyfilled_ids = _polyfilled_function_ids()
    rule_map = get_torch_obj_rule_map()
    handlers = PolyfilledFunctionVariable._get_polyfill_handlers()
    for fn in (original, wrapped):
        id_dispatch.pop(id(fn), None)
        polyfilled_ids.discard(id(fn))
        rule_map.pop(fn, None)
        handlers.pop(fn, None)
