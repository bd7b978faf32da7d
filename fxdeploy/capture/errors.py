"""Turn a torch.export failure into a message that names the user's line and the fix."""

from __future__ import annotations

import ast
import os
import re
import sys
import traceback
from typing import Any

import torch

from fxdeploy.capture import branches

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[\w<>]+)')
_INTERNAL = (
    os.path.dirname(torch.__file__),
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # the fxdeploy package
    "<frozen ",
    "contextlib.py",
)
_DATA_DEPENDENT = (
    "GuardOnDataDependentSymNode",
    "data-dependent",
    "data dependent",
    "Could not guard on data-dependent",
    "unbacked",
)


def explain(exc: BaseException, model: Any, subs: Any) -> str:
    guard = branches.parse(exc)
    if guard is not None:  # said in fxdeploy's words, torch's own first line aside
        lines = [f"fxdeploy could not capture {type(model).__name__}:"]
        lines += branches.explain(guard, branches.parse(getattr(exc, "decided", None)), getattr(exc, "retry", ""))
        return "\n".join(lines + _active(subs, model))
    frame = _user_frame(exc)
    summary = _first_line(exc)
    lines = [f"fxdeploy could not capture {type(model).__name__}: {type(exc).__name__}: {summary}"]
    if frame is not None:
        file, line, func, module = frame
        lines.append(f"  tracing broke in {func}() at {file}:{line}")
        code = _source_line(file, line)
        if code:
            lines.append(f"      {code}")
        if _is_data_dependent(exc):
            qualified = f"{module}.{func}" if module else func
            lines.append(
                "  This is data-dependent Python (NMS, boolean masks, per-image lists, len() of a "
                "result). Register a tensor-only replacement that is used only while fxdeploy traces:"
            )
            lines.append(f"      @fxdeploy.substitute({qualified})")
            lines.append(f"      def {func}_tensor_only(...): ...  # e.g. built on fxdeploy.ops.multiclass_nms")
            lines.append("  or pass lower(..., substitutions={" + qualified + ": replacement}).")
    text = str(exc)
    if "specialized it to be a constant (1)" in text or "specialized it to be a constant (0)" in text:
        lines.append(
            "  A dynamic dim whose example size is 0 or 1 is specialized by torch.export. fxdeploy repeats "
            "a size-1 tensor input to size 2 itself, but not a size of 0 or a tensor nested in a list or "
            "dict: give that example a size of 2 or more there (the range can still start at 1)."
        )
    lines += _diagnosis(text)
    return "\n".join(lines + _active(subs, model))


def _active(subs: Any, model: Any) -> list[str]:
    """The substitutions that could have changed this capture: a function one, or a method one of a
    class the model holds (fxdeploy's own ``TransformerEncoder.forward`` says nothing of a CNN)."""
    classes = {type(m) for m in model.modules()} if isinstance(model, torch.nn.Module) else set()
    active = [s.name for s in subs
              if not s.is_method or any(getattr(c, s.attribute, None) is s.target for c in classes)]
    return [f"  substitutions active during this capture: {', '.join(active)}"] if active else []


def _diagnosis(text: str, most: int = 8) -> list[str]:
    """torch.export's own diagnosis, which its first line leaves out: each violated guard or
    specialization ("- Not all values of samples ... satisfy the generated guard ...") and its
    suggested fixes, at most ``most`` guard lines."""
    guards = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("- ")]
    lines = [f"  torch.export: {guard}" for guard in guards[:most]]
    if len(guards) > most:
        lines.append(f"  torch.export: ... and {len(guards) - most} more")
    if "Suggested fixes:" in text:
        fixes = []
        for line in text.split("Suggested fixes:", 1)[1].splitlines()[1:]:
            if not line.strip():
                break
            fixes.append(f"      {line.strip()}")
        lines += ["  torch.export's suggested fixes (for dynamic_shapes):", *fixes]
    return lines


def _is_data_dependent(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    return any(marker in text for marker in _DATA_DEPENDENT)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _owner(frame: Any) -> str:
    """The module, and the class of a method (``__main__.Detector``): what ``substitute`` names a
    method by, where its bare name (``__main__.forward``) names nothing."""
    module = frame.f_globals.get("__name__", "")
    qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    owner = qualname.rsplit(".", 1)[0] if "." in qualname and "<locals>" not in qualname else ""
    return f"{module}.{owner}" if module and owner else module


def _user_frame(exc: BaseException) -> tuple[str, int, str, str] | None:
    """The innermost frame outside torch and fxdeploy: from the traceback, else from dynamo's text."""
    best: tuple[str, int, str, str] | None = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        file = frame.f_code.co_filename
        if not file.startswith(_INTERNAL) and not any(p in file for p in _INTERNAL[2:]):
            best = (file, line, frame.f_code.co_name, _owner(frame))
    cause = exc.__cause__ or exc.__context__
    if best is None and cause is not None and cause is not exc:
        best = _user_frame(cause)
    if best is None:
        for match in _FRAME.finditer(str(exc)):
            file = match["file"]
            if not file.startswith(_INTERNAL[:2]):
                best = (file, int(match["line"]), match["func"], _owner_at(file, int(match["line"])))
    return best


def _owner_at(file: str, line: int) -> str:
    """``_owner`` for a frame known by its file and line only (dynamo's text): the classes around
    the line, read from the source, and the module loaded from that file."""
    try:
        with open(file, encoding="utf-8") as handle:
            node: ast.AST = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return ""
    owners: list[str] = []
    while True:
        inner = next((c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.ClassDef, ast.FunctionDef))
                      and c.lineno <= line <= (c.end_lineno or c.lineno)), None)
        if inner is None or isinstance(inner, ast.FunctionDef):
            break
        owners.append(inner.name)
        node = inner
    path = os.path.abspath(file)
    module = next((name for name, m in list(sys.modules.items())
                   if os.path.abspath(getattr(m, "__file__", None) or "-") == path), "")
    return ".".join(part for part in (module, *owners) if part)


def _source_line(file: str, line: int) -> str:
    try:
        with open(file, encoding="utf-8") as handle:
            for number, text in enumerate(handle, start=1):
                if number == line:
                    return text.strip()
    except OSError:
        return ""
    return ""
