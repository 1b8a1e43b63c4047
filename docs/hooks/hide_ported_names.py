"""griffe extension: the API reference shows no ``**ported_names: NoReturn`` parameter.

Functions and loss modules take ``**ported_names: NoReturn`` so that other libraries' argument
names (``top_k``, ``weighing_scheme``, ...) get a ``TypeError`` that points to ours, and type
checkers still flag them. It is no option a reader can pass, so the rendered signatures and
``Args`` tables leave it out; the "Coming from" pages list the names it catches.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

HIDDEN = "ported_names"
# The docstring's `**ported_names: ...` entry and its more-indented continuation lines.
_ENTRY = re.compile(r"^(?P<indent>[ \t]*)\*\*ported_names:.*\n(?:(?P=indent)[ \t]+\S.*\n)*", re.M)


class HidePortedNames(griffe.Extension):
    """Drops the ``**ported_names`` catch-all from every documented signature and docstring."""

    def on_function_instance(self, *, func: griffe.Function, **_: Any) -> None:
        """Remove the parameter from the function, and its entry from its docstring."""
        if HIDDEN in func.parameters:
            del func.parameters[HIDDEN]
        for documented in (func, func.parent):
            docstring = getattr(documented, "docstring", None)
            if docstring is not None:
                docstring.value = _ENTRY.sub("", docstring.value)
