"""Plans of one process share the own GEMM's packed weights (runtime/weight_packings.h).

generate() compiles a prefill and a decode graph over the same parameters; each plan used to pack
its own copy (a float32 Llama-3.2-1B: 15 GB peak against eager's 5.2). The second plan now finds
the first one's packing: the report counts it as shared, not as a second copy, and an in-place
update of the weights (load_state_dict) is packed again, never read stale."""
import gc

import torch

import verifuse
from verifuse import _C


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.SiLU(), torch.nn.Linear(512, 256)).eval()


def _run(compiled, model, rows):
    x = torch.randn(rows, 256)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)  # a stale packing is off by O(1)


def test_a_second_plan_over_the_same_weights_shares_their_packing():
    torch._dynamo.reset()
    gc.collect()  # earlier tests' plans, and the packings only they held, go
    _C.wait_for_deferred_work()
    before = _C.gemm_packing_counts()
    model = _model()
    compiled = torch.compile(model, backend="verifuse", dynamic=False, options={"strict": True})
    with verifuse.report.collect() as graphs:
        _run(compiled, model, 1)  # a decode-sized plan: the own GEMM packs both linears
        _run(compiled, model, 2)  # another graph (static shapes), the same parameters
    assert len(graphs) == 2, graphs
    first, second = graphs
    packed = 256 * 512 * 4 * 2
    assert first.weight_copy_bytes >= packed and first.shared_weight_copy_bytes == 0, first
    assert second.weight_copy_bytes >= packed, second
    assert second.shared_weight_copy_bytes == second.weight_copy_bytes, second
    # Held once: two packings (one per linear) for the two plans, found by the second plan.
    _C.wait_for_deferred_work()
    after = _C.gemm_packing_counts()
    assert after["alive"] - before["alive"] == 2, (before, after)
    assert after["hits"] - before["hits"] >= 2, (before, after)
    text = str(verifuse.report.Report(graphs, compile_seconds=0.0))
    assert "more shared between plans" in text and "(shared " in text, text


def test_weights_updated_in_place_are_packed_again():
    torch._dynamo.reset()
    model = _model()
    compiled = torch.compile(model, backend="verifuse", dynamic=False, options={"strict": True})
    _run(compiled, model, 1)
    _run(compiled, model, 2)  # this graph's plan keeps the packing alive through the update
    with torch.no_grad():  # what load_state_dict does to the parameters: copy_ (the version moves)
        model[0].weight.mul_(-2.0)
        model[2].weight.copy_(torch.randn(256, 512))
    with verifuse.report.collect() as graphs:
        _run(compiled, model, 1)  # a plan for the new weights: must not find the old packing
        _run(compiled, model, 2)
    assert [g.shared_weight_copy_bytes > 0 for g in graphs] == [False, True], graphs
