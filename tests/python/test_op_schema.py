"""The C++ operator schema table (backend/include/verifuse/ir/op_schema.h) names ATen's operands
as ATen does: every aten:: and quantized_decomposed:: row must equal the leading arguments of
torch's own schema for that operator, so `operand(n, Convolution::weight)` reads what the lowering
put there (the lowering normalizes every call to the schema's order)."""

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

from verifuse import _C


def _torch_schemas(qualified):
    namespace, name = qualified.split("::")
    packet = getattr(getattr(torch.ops, namespace), name)
    return [[a.name for a in getattr(packet, ov)._schema.arguments if not a.is_out] for ov in packet.overloads()]


ROWS = [row for row in _C.op_schemas() if row[1].startswith(("aten::", "quantized_decomposed::"))]


def test_the_table_covers_the_operators_the_rules_read():
    ops = {row[1] for row in ROWS}
    assert {"aten::convolution", "aten::addmm", "aten::native_layer_norm", "aten::_softmax"} <= ops
    assert len(ROWS) > 40


@pytest.mark.parametrize("struct,op,operands", ROWS, ids=[row[0] for row in ROWS])
def test_aten_rows_match_torch(struct, op, operands):
    overloads = _torch_schemas(op)
    # The row names the tensor overload's operands; an overload whose leading arguments are the
    # row's (add.Tensor and add.Scalar: self, other, alpha) is what the lowering produces.
    assert any(names[: len(operands)] == operands and len(names) == len(operands) for names in overloads), (
        f"{struct} ({op}) names {operands}; torch's overloads take {overloads}")


def test_fused_rows_define_the_fused_ops():
    rows = {row[1]: row[2] for row in _C.op_schemas()}
    assert rows["verifuse::conv"][:3] == ["x", "weight", "bias"] and rows["verifuse::conv"][-1] == "post_ops"
    assert rows["verifuse::linear"] == ["x", "weight", "bias", "post_ops"]
    qconv, qlinear = rows["verifuse::qconv"], rows["verifuse::qlinear"]
    # qlinear is qconv without the spatial attributes: the requantization operands line up by name
    assert [o for o in qconv if o not in ("stride", "padding", "dilation", "groups")] == qlinear


def test_fused_rows_of_dispatcher_ops_match_their_registration():
    # The int8 ops run as dispatcher ops (runtime/int8_ops.cpp registers them at the first compile):
    # the row's operand names are the registered schema's, so a rewrite that builds the node by
    # name passes what the op reads.
    import torch.nn as nn

    import verifuse  # noqa: F401  (the backend)

    with torch.no_grad():
        torch.compile(nn.Linear(4, 4).eval(), backend="verifuse")(torch.randn(2, 4))
    rows = [row for row in _C.op_schemas() if row[1].startswith("verifuse::")]
    registered = [row for row in rows if hasattr(torch.ops.verifuse, row[1].split("::")[1])]
    assert {"verifuse::qconv", "verifuse::int_mm", "verifuse::int8_weight_mm"} <= {row[1] for row in registered}
    for struct, op, operands in registered:
        assert _torch_schemas(op) == [operands], f"{struct} ({op}) names {operands}; registered {_torch_schemas(op)}"
