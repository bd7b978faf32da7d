"""A capture that stopped at a data-dependent guard, in fxdeploy's words: which line, what it read,
and what to write.

torch.export stops where Python needs a value it cannot know while tracing: "Could not guard on
data-dependent expression Min(1000, u2) > 0". Its symbols are either *sizes* (the rows a filter,
``nonzero`` or an NMS kept: torch lists them as size-like), which fxdeploy decides by the example's
own sizes (``exporting._decided_by_example``), or *values* (``int(t)``, ``t.item()``, a tensor as a
slice bound), which no example can decide for every input: the function that computes them needs a
tensor-only substitution. A per-row Python loop around it (``[f(m, b) for m, b in zip(masks,
boxes)]``) is itself data-dependent, so the function to substitute is the one that loops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fxdeploy.capture.frames import Frame, chain, qualified, reached, section_frames, source, traceback_frames

_GUARD = re.compile(r"Could not guard on data-dependent expression (?P<expr>.+?) \(unhinted")
_SIZE_LIKE = re.compile(r"\(Size-like symbols: (?P<symbols>[^)]*)\)")
_SYMBOL = re.compile(r"\b(?:u|zuf)\d+\b")  # a data-dependent int (u0) or float (zuf0, torch 2.11)
_DYNAMO_BRANCH = "Data-dependent branching"
_ANONYMOUS = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>", "<lambda>", "<module>")


@dataclass(frozen=True)
class Guard:
    """A data-dependent guard torch.export could not decide, and the user frames that reached it."""

    expression: str
    values: tuple[str, ...]
    """The symbols read from tensor values; the others are sizes of selections."""
    frames: tuple[Frame, ...]
    """Outside torch and fxdeploy, outermost first."""

    @property
    def site(self) -> Frame | None:
        return self.frames[-1] if self.frames else None


def parse(exc: BaseException | None) -> Guard | None:
    """The guard ``exc`` (or an exception it was raised from) failed on, else None."""
    errors = chain(exc)
    text = "\n".join(str(e) for e in errors)
    match = _GUARD.search(text)
    frames = section_frames(text) or traceback_frames(errors)
    if match is None:  # dynamo's own refusal of an `if` on a tensor
        if _DYNAMO_BRANCH not in text:
            return None
        return Guard("whether a tensor is true", ("a tensor",), _outside(frames))
    expression = match["expr"]
    size_like = _SIZE_LIKE.search(text[match.end():])
    sizes = set(_SYMBOL.findall(size_like["symbols"])) if size_like else set()
    values = tuple(s for s in dict.fromkeys(_SYMBOL.findall(expression)) if s not in sizes)
    return Guard(expression, values, _outside(frames))


def _outside(frames: list[Frame]) -> tuple[Frame, ...]:
    return tuple(reached(frames))


def elsewhere(second: BaseException, first: BaseException) -> bool:
    """Whether ``second`` stopped at another guard than ``first``: the example decided the first."""
    a, b = parse(first), parse(second)
    return a is not None and b is not None and b.site is not None and a.site != b.site


def explain(guard: Guard, decided: Guard | None = None, retry: str = "") -> list[str]:
    """The lines of a CaptureError for ``guard``; ``decided``: the branch the example decided before
    it; ``retry``: why deciding ``guard`` by the example failed, for a branch on sizes."""
    site = guard.site
    where = f"tracing broke in {site.func}() at {site.file}:{site.line}: " if site else ""
    lines = [f"  {where}a Python branch or size depends on data torch.export cannot know while tracing"]
    if site and (code := source(site)):
        lines.append(f"      {code}")
    callers = [f for f in guard.frames[:-1] if f.func not in _ANONYMOUS]
    if callers:
        lines.append("  called from " + " <- ".join(str(f) for f in reversed(callers)))
    if guard.values:
        symbols = [v for v in guard.values if _SYMBOL.fullmatch(v)]
        detail = f" ({', '.join(symbols)} {'comes' if len(symbols) == 1 else 'come'} from them)" if symbols else ""
        lines.append(
            f"  torch.export needed to decide {guard.expression}, which reads a tensor's values{detail}: an int(t), "
            "a t.item(), an if on a tensor, or a tensor as a slice bound or a size. One engine serves every input, "
            "so no example can decide it."
        )
    else:
        lines.append(
            f"  torch.export needed to decide {guard.expression}, where {', '.join(_SYMBOL.findall(guard.expression))} "
            "counts the rows a selection kept (a boolean mask, nonzero, an NMS). fxdeploy decides a branch that "
            "reads only such sizes by the example's own sizes, and lower() checks the artifact against eager"
            + (f"; here that failed too ({retry})." if retry else ".")
        )
    lines += _what_to_write(guard)
    if decided is not None and decided.site is not None:
        lines.append(f"  fxdeploy decided the branch before it, at {decided.site}, by the example's own sizes (it "
                     "reads only the sizes of selections):")
        lines.append(f"      {source(decided.site)}")
    return lines


def _what_to_write(guard: Guard) -> list[str]:
    target = _to_substitute(guard.frames)
    if target is None:
        return ["  Write it with tensor ops of static shapes (a mask, torch.where) instead of Python on the data."]
    frame, looped = target
    name = qualified(frame)
    why = " (it loops over rows in Python, which is data-dependent too)" if looped else ""
    short = name.rpartition(".")[2]
    return [
        f"  Give {frame.func}{why} a tensor-only replacement of static shapes (a mask instead of a slice by "
        "values), used only while fxdeploy traces; eager stays as it is:",
        f"      @fxdeploy.substitute({name})",
        f"      def {short}_tensor_only(...): ...",
        f"  or pass lower(..., substitutions={{{name}: replacement}}).",
    ]


def _to_substitute(frames: tuple[Frame, ...]) -> tuple[Frame, bool] | None:
    """The innermost named function, or the one calling it from a comprehension (a per-row loop)."""
    named = [i for i, f in enumerate(frames) if f.func not in _ANONYMOUS]
    if not named:
        return None
    inner = named[-1]
    loop = inner > 0 and frames[inner - 1].func in _ANONYMOUS[:4]
    callers = [i for i in named if i < inner]
    return (frames[callers[-1]], True) if loop and callers else (frames[inner], False)
