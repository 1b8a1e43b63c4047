r"""mkdocs hook: formulas rendered to MathML at build time, so the site needs no script or CDN.

``pymdownx.arithmatex`` (generic mode) wraps every ``$...$`` and ``$$...$$`` of the pages and of
the docstrings that mkdocstrings renders in ``<span class="arithmatex">\(...\)</span>`` or
``<div class="arithmatex">\[...\]</div>``. This hook replaces each with the MathML that
``latex2mathml`` writes; browsers draw MathML themselves, offline.
"""

from __future__ import annotations

import html
import re
from typing import Any

from latex2mathml.converter import convert

_WRAPPED = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*\\(?P<open>[(\[])(?P<tex>.*?)\\[)\]]\s*</(?P=tag)>',
    re.DOTALL,
)


def _mathml(match: re.Match[str]) -> str:
    display = "block" if match["open"] == "[" else "inline"
    return convert(html.unescape(match["tex"]).strip(), display=display)


def on_page_content(output: str, **_: Any) -> str:
    """Every arithmatex-wrapped formula of a page's HTML as MathML."""
    return _WRAPPED.sub(_mathml, output)
