"""docs/dialect.md is generated from the registry and must be current."""
import os

import thunder.ops  # noqa: F401
from thunder.tools.gen_dialect_doc import render


def test_dialect_doc_is_up_to_date():
    path = os.path.join(os.path.dirname(__file__), "..", "docs", "dialect.md")
    with open(path) as f:
        assert f.read() == render(), "docs/dialect.md is stale: run python -m thunder.tools.gen_dialect_doc"


def test_every_op_is_documented_with_its_torch_name():
    text = render()
    for op in thunder.ops.registry.OPS.values():
        assert f"`{op.qualname}`" in text and f"`{op.torch_name}`" in text
