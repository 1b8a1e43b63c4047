"""Run-time signatures spell out the keywords typed once as ``Unpack[...Keywords]``."""

from __future__ import annotations

import inspect
import pydoc
import typing
from typing import Any

import pytest

import torch_ndcg
from torch_ndcg._metric_base import MetricKeywords
from torch_ndcg._options import DEFAULTS

PUBLIC = [getattr(torch_ndcg, name) for name in torch_ndcg.__all__ if name != "__version__"]


def _typed_keywords(function: Any) -> dict[str, Any]:
    """The keywords a type checker sees in ``**options: Unpack[X]`` (X's annotations), or {}."""
    code = function.__code__
    if not code.co_flags & inspect.CO_VARKEYWORDS:
        return {}
    varargs = 1 if code.co_flags & inspect.CO_VARARGS else 0
    name = code.co_varnames[code.co_argcount + code.co_kwonlyargcount + varargs]
    hint = typing.get_type_hints(function, include_extras=True).get(name)
    if typing.get_origin(hint) is None or "Unpack" not in repr(typing.get_origin(hint)):
        return {}
    (keywords,) = typing.get_args(hint)
    return typing.get_type_hints(keywords, include_extras=True)


def _callables() -> list[Any]:
    found = []
    for obj in PUBLIC:
        members = vars(obj).values() if isinstance(obj, type) else [obj]
        found += [m for m in members if inspect.isfunction(m) and _typed_keywords(m)]
    return found


CALLABLES = _callables()


def test_every_entry_point_with_typed_keywords_is_found() -> None:
    names = {function.__qualname__ for function in CALLABLES}
    for expected in (
        "ndcg",
        "dcg",
        "retrieval_ndcg",
        "catalog_ndcg",
        "lambdarank_loss",
        "NDCG.__init__",
        "NDCG.update_catalog",
        "RetrievalNDCG.__init__",
        "LambdaRankLoss.__init__",
        "UnbiasedLambdaRankLoss.__init__",
    ):
        assert expected in names


@pytest.mark.parametrize("function", CALLABLES, ids=lambda f: f.__qualname__)
def test_signature_shows_each_keyword_with_its_default(function: Any) -> None:
    typed = _typed_keywords(function)
    parameters = inspect.signature(function).parameters
    metric = typing.get_type_hints(MetricKeywords)
    theirs = metric if metric.keys() <= typed.keys() else {}
    for name in typed:
        if name not in DEFAULTS or name in theirs:  # torchmetrics' keywords: behind **options
            assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
            continue
        assert name in parameters, name
        if parameters[name].kind is inspect.Parameter.KEYWORD_ONLY and name not in ("k",):
            assert parameters[name].default == DEFAULTS[name], name


def test_help_text_shows_the_defaults() -> None:
    text = pydoc.render_doc(torch_ndcg.ndcg, renderer=pydoc.plaintext)
    (line,) = [line for line in text.splitlines() if line.startswith("ndcg(")]
    assert "**options" not in line
    assert "ties: Literal['average', 'first'] = 'average'" in line


def test_spelled_signature_binds_the_calls_users_make() -> None:
    signature = inspect.signature(torch_ndcg.LambdaRankLoss)
    bound = signature.bind(k=5, sigma=2.0)
    assert bound.arguments == {"k": 5, "sigma": 2.0}
    with pytest.raises(TypeError):
        signature.bind(sigmaa=2.0)
