"""griffe extension: the API reference shows every keyword argument with its type and default.

The public functions, metrics and loss modules take their options as ``**options:
Unpack[...Keywords]``: the keywords are declared once, in a TypedDict of
`torch_ndcg._options`, with their defaults in its ``DEFAULTS`` table, and a type checker sees
each of them. The rendered signatures spell them out again, as keyword-only parameters with
the TypedDict's annotation and the table's default (so the ``Keyword Args`` tables get their
types too). Keywords without a default there (torchmetrics' own, passed on to ``Metric``) stay
behind ``**options``; when none is left, the parameter and its ``Args`` entry (which says what
other libraries' names do) are dropped, as the "Coming from" pages say that.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

# A docstring's `**name: ...` entry and its more-indented continuation lines.
_ENTRY = r"^(?P<indent>[ \t]*)\*\*{name}:.*\n(?:(?P=indent)[ \t]+\S.*\n)*"


def _defaults(package: griffe.Module) -> dict[str, str]:
    """``torch_ndcg._options.DEFAULTS`` as source text, strings in double quotes."""
    table = package["_options.DEFAULTS"].value
    defaults = {}
    for key, value in zip(table.keys, table.values, strict=True):
        literal = ast.literal_eval(str(value))
        shown = f'"{literal}"' if isinstance(literal, str) else str(value)
        defaults[ast.literal_eval(str(key))] = shown
    return defaults


def _functions(obj: griffe.Object) -> Any:
    """Every function defined in ``obj`` (a module or class), recursively; no aliases."""
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Function):
            yield member
        elif isinstance(member, griffe.Module | griffe.Class):
            yield from _functions(member)


class ExpandKeywords(griffe.Extension):
    """Spells ``**options: Unpack[SomeKeywords]`` out as keyword-only parameters."""

    def on_package(self, *, pkg: griffe.Module, **_: Any) -> None:
        """Expand the keywords of every function of the package."""
        if pkg.name != "torch_ndcg":
            return
        defaults = _defaults(pkg)
        for func in _functions(pkg):
            self._expand(func, defaults)

    @staticmethod
    def _expand(func: griffe.Function, defaults: dict[str, str]) -> None:
        params = list(func.parameters)
        if not params or params[-1].kind is not griffe.ParameterKind.var_keyword:
            return
        var = params[-1]
        annotation = var.annotation
        if not (isinstance(annotation, griffe.ExprSubscript) and str(annotation.left) == "Unpack"):
            return
        keywords = func.modules_collection[annotation.slice.canonical_path]
        members: dict[str, griffe.Attribute] = {}
        for cls in [*reversed(keywords.mro()), keywords]:
            members.update(
                (name, member)
                for name, member in cls.members.items()
                if isinstance(member, griffe.Attribute)
            )
        # torchmetrics' keywords (`MetricKeywords`) keep their own defaults: not ours to show.
        ours = {name for name, member in members.items() if member.parent.name != "MetricKeywords"}
        named = [name for name in defaults if name in ours]  # in the table's order
        expanded = [
            griffe.Parameter(
                name,
                annotation=members[name].annotation,
                kind=griffe.ParameterKind.keyword_only,
                default=defaults[name],
            )
            for name in named
        ]
        kept = [var] if len(named) < len(members) else []
        func.parameters = griffe.Parameters(*params[:-1], *expanded, *kept)
        if not kept:
            entry = re.compile(_ENTRY.format(name=var.name), re.M)
            for documented in (func, func.parent):
                docstring = getattr(documented, "docstring", None)
                if docstring is not None:
                    docstring.value = entry.sub("", docstring.value)
