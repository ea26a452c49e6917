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
