"""Test set-up: the example scripts importable, and hypothesis settings for CI."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import settings

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

# Property tests time nothing: a first call into torch can take longer than hypothesis' default
# 200 ms deadline on a loaded CI machine, which would fail a correct test.
settings.register_profile("torch_ndcg", deadline=None)
settings.load_profile("torch_ndcg")
