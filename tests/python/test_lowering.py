"""Lowering details: dtype/layout/memory-format codes, schema normalization, golden IR text."""
import torch

from verifuse import _C
from verifuse.lowering import DTYPE_CODES, LAYOUT_CODES, MEMORY_FORMAT_CODES, readable_name


def test_dtype_codes_match_c10_scalar_type():
    # torch exposes ScalarType numbering through the JIT's dtype <-> int mapping.
    for dtype, code in DTYPE_CODES.items():
        assert torch._C._jit_get_schemas_for_operator  # noqa: B018 - module sanity
        t = torch.empty(0, dtype=dtype)
        assert torch.ops.prim.dtype(t) == code, dtype


def test_layout_and_memory_format_codes():
    assert LAYOUT_CODES[torch.strided] == 0
    assert MEMORY_FORMAT_CODES[torch.channels_last] == 2


def test_readable_names_from_dynamo_sources():
    src = "L['self']._modules['layer1']._modules['0']._parameters['weight']"
    assert readable_name(src, "arg0_1") == "layer1.0.weight"
    assert readable_name(None, "l_x_") == "l_x"


def test_graph_text_round_trips_through_cpp():
    g = _C.Graph()
    x = g.add_input("x", "Tensor")
    w = g.add_constant("w", torch.randn(4, 3))
    (out,) = g.add_node("aten::mm", "", [_C.Arg.value(x), _C.Arg.constant(w)], ["Tensor"])
    g.set_outputs([_C.Arg.value(out)])
    text = g.to_text()
    assert "aten::mm(%x, $w)" in text
    assert _C.parse_graph(text).to_text() == text


def test_compiled_graph_runs_and_detects_stale_weights():
    import pytest

    w = torch.randn(3, 2)
    g = _C.Graph()
    x = g.add_input("x", "Tensor")
    cw = g.add_constant("w", w)
    (out,) = g.add_node("aten::mm", "", [_C.Arg.value(x), _C.Arg.constant(cw)], ["Tensor"])
    g.set_outputs([_C.Arg.value(out)])
    plan = _C.compile(g, [1], [(0, cw)], 2)
    x_val = torch.randn(5, 3)
    (y,) = plan.run([w, x_val])
    torch.testing.assert_close(y, x_val @ w)
    w.mul_(2)
    with pytest.raises(_C.WeightsModifiedError, match="modified in place"):
        plan.run([w, x_val])
