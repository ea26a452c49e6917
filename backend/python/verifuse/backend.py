"""The torch.compile backend: ``torch.compile(model, backend="verifuse", options={...})``.

Flow (design.md section 1): options -> inference check -> aot_autograd with verifuse's
decomposition table -> freeze parameters/buffers -> lower to the C++ IR -> compile a C++ plan.
Anything verifuse cannot handle falls back to eager with one warning naming the reason, or raises
VerifuseError under ``strict``.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx

from . import report as _report
from .options import Options

__all__ = ["verifuse_backend", "VerifuseError", "VerifuseFallbackWarning", "decomposition_table"]

logger = logging.getLogger(__name__)


class VerifuseError(RuntimeError):
    """A graph verifuse could not compile, raised instead of falling back under strict mode."""


class VerifuseFallbackWarning(UserWarning):
    """verifuse ran (part of) a model in eager mode; the message says why."""


def decomposition_table() -> dict:
    """Core ATen decompositions minus the operators verifuse keeps whole so it can fuse them:
    convolution, batch norm, addmm/mm and the activations that become oneDNN post-ops. Built once
    per process (25-60 ms per compile otherwise); each caller gets its own copy."""
    return dict(_decomposition_table())


@functools.lru_cache(maxsize=1)
def _decomposition_table() -> dict:
    from torch._decomp import core_aten_decompositions

    aten = torch.ops.aten
    keep = {
        aten._native_batch_norm_legit_no_training, aten.native_batch_norm, aten._batch_norm_no_update,
        aten.relu, aten.leaky_relu, aten.gelu, aten.silu, aten.sigmoid, aten.tanh, aten.hardswish,
        aten.hardsigmoid, aten.hardtanh, aten.elu, aten.clamp, aten.clamp_min, aten.clamp_max,
        aten.addmm, aten.mm, aten.bmm, aten.convolution, aten._softmax, aten.native_layer_norm,
        aten.mish, aten.avg_pool2d, aten.max_pool2d_with_indices, aten._adaptive_avg_pool2d,
        # Attention stays one op: ATen's fused CPU kernel instead of bmm/softmax/mask passes.
        aten.scaled_dot_product_attention, aten._scaled_dot_product_flash_attention_for_cpu,
    }
    return {op: fn for op, fn in core_aten_decompositions().items() if op.overloadpacket not in keep}


def _fallback(gm: torch.fx.GraphModule, reason: str, options: Options, graph_report: _report.GraphReport,
              op: str = "<graph>") -> Callable:
    if options.strict:
        raise VerifuseError(f"verifuse (strict): cannot compile graph: {reason}")
    warnings.warn(f"verifuse: running this graph in eager mode: {reason}", VerifuseFallbackWarning, stacklevel=2)
    _report.record_fallback(graph_report, op, reason)
    graph_report.engine = "eager"
    forward = gm.forward

    def run_eagerly(*args: Any, **kwargs: Any) -> Any:
        _report.observe(graph_report)
        return forward(*args, **kwargs)

    return run_eagerly


def _inference_problem(example_inputs: Sequence[Any], names: Sequence[str]) -> Optional[str]:
    """Why this graph is not an inference graph verifuse runs, or None."""
    tensors = [(n, t) for n, t in zip(names, example_inputs) if isinstance(t, torch.Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for _, t in tensors):
        return ("autograd is recording (grad mode on and parameters require grad); verifuse compiles "
                "inference only: call the model under torch.no_grad() or torch.inference_mode()")
    for name, t in tensors:
        if t.device.type != "cpu":
            return f"input {name} is on device {t.device}; verifuse runs on CPU"
        if t.layout != torch.strided:
            return f"input {name} has layout {t.layout}; verifuse supports strided tensors"
        # 0-d tensors are Python scalars Dynamo wrapped under dynamic=True (e.g. a batch norm's
        # momentum as float64); they are not model data.
        if (t.is_floating_point() or t.is_complex()) and t.dtype not in _MODEL_DTYPES and t.dim() > 0:
            return f"input {name} has dtype {t.dtype}; {_dtype_support(t.dtype)}"
    return None


# Model dtypes verifuse plans. bfloat16 runs its linears on oneDNN's bf16 kernels, which need
# native bf16 arithmetic (avx512_bf16 or AMX); without it they are slower than eager's.
_MODEL_DTYPES = (torch.float32, torch.bfloat16)


def _dtype_support(dtype: torch.dtype) -> str:
    if dtype == torch.float16:
        return ("verifuse supports float32 and bfloat16 models: float16 has no native arithmetic on "
                "this CPU for oneDNN (it needs avx512_fp16 or AMX-FP16), so its kernels would be "
                "reference code slower than eager")
    return "verifuse supports float32 and bfloat16 models"


def _bf16_problem(example_inputs: Sequence[Any], names: Sequence[str]) -> Optional[str]:
    """A bfloat16 model on a CPU verifuse's bf16 kernels cannot run on: the reason to run it eagerly,
    or None. With native bf16 (avx512_bf16 or AMX) the kernels compute in bf16; on any other CPU
    with AVX2 they keep bf16 storage and compute in float32 (the own GEMM's widening variant,
    oneDNN's float32 convolutions and matmuls on widened data), rounding each op's result to bf16
    as the native kernels do (docs/fast-path.md, bfloat16 models)."""
    from . import _C

    bf16 = any(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 and t.dim() > 0 for t in example_inputs)
    caps = _C.capabilities()
    if bf16 and not (caps["onednn_native_bf16"] or caps["own_avx2"]):
        return ("bfloat16 model on a CPU without AVX2 or native bf16 arithmetic (avx512_bf16 or AMX): "
                "verifuse's bf16 kernels need one of them")
    return None


def _input_names(gm: torch.fx.GraphModule) -> list[str]:
    from .lowering import readable_name

    names = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        source = getattr(node, "_dynamo_source", None)
        source_name = None
        if source is not None:
            try:
                source_name = source.name() if callable(source.name) else source.name
            except Exception:  # the Source API moved between torch versions
                source_name = None
        names.append(readable_name(source_name, node.name))
    return names


_cap_checked = False


def _warn_about_an_unknown_cap() -> None:
    """A VERIFUSE_MAX_ISA / ONEDNN_MAX_CPU_ISA value that names no tier is ignored by the capability
    model (the CPU's own tier runs): say so once, so a typo does not pass for a tested tier."""
    global _cap_checked
    if _cap_checked:
        return
    _cap_checked = True
    from . import _C

    error = _C.capabilities()["cap_error"]
    if error:
        warnings.warn(f"verifuse: {error} (tiers: baseline, avx2, avx2_vnni, avx512, avx512_vnni, avx512_bf16, "
                      f"amx); running as the CPU's own tier", stacklevel=3)


def verifuse_backend(gm: torch.fx.GraphModule, example_inputs: list, *, options: Optional[dict] = None,
                     mode: Optional[str] = None) -> Callable:
    """Dynamo backend entry point (registered as "verifuse" through the torch_dynamo_backends
    entry point, so no import is needed)."""
    from .saved import SavedGraph, SaveState

    opts = Options.parse(options)  # an unknown option is the user's error, even when not strict
    _warn_about_an_unknown_cap()
    start = time.perf_counter()
    graph_report = _report.GraphReport(graph_id=_report.next_graph_id())
    names = _input_names(gm)
    save_state = SaveState()  # what aot_compile's save needs (saved.py)
    try:
        problem = _inference_problem(example_inputs, names) or _bf16_problem(example_inputs, names)
        if problem is not None:
            compiled = _fallback(gm, problem, opts, graph_report)
            save_state.reason = problem
        else:
            compiled = _compile_with_one_trace(gm, example_inputs, names, opts, graph_report, save_state,
                                               plan_cache=_plan_cache_wanted(options), record=_under_aot_compile())
            if compiled is None:
                compiled = _compile_with_aot(gm, example_inputs, names, opts, graph_report, save_state,
                                             plan_cache=_plan_cache_wanted(options), record=_under_aot_compile())
        graph_report.compile_seconds = time.perf_counter() - start
        _report.publish(graph_report)
        return SavedGraph(compiled, save_state)
    except _pass_through_exceptions():
        # Dynamo's own control flow (restart analysis with scalars tensorified, ...): not a
        # failure of this graph, and Dynamo must see it to try again.
        raise
    except Exception as exc:  # a model must never fail because of verifuse
        logger.debug("verifuse: compile failed", exc_info=True)
        if opts.strict:
            raise VerifuseError(f"verifuse (strict): compile failed: {type(exc).__name__}: {exc}") from exc
        graph_report.fallbacks.clear()
        reason = f"internal error while compiling: {type(exc).__name__}: {exc}"
        compiled = _fallback(gm, reason, opts, graph_report)
        graph_report.compile_seconds = time.perf_counter() - start
        _report.publish(graph_report)
        save_state.reason = reason
        return SavedGraph(compiled, save_state)


def _compile_with_one_trace(gm: torch.fx.GraphModule, example_inputs: list, names: list[str], opts: Options,
                            graph_report: _report.GraphReport, save_state: Any, plan_cache: bool = False,
                            record: bool = False) -> Optional[Callable]:
    """The graph compiled from one make_fx trace (aten_trace.py), called with Dynamo's arguments
    as they are; None when it needs aot_autograd (the report says why)."""
    from .aten_trace import one_trace_wanted, trace_inference_graph

    if not one_trace_wanted():
        graph_report.aten_trace = "aot_autograd (VERIFUSE_ONE_TRACE=0)"
        return None
    start = time.perf_counter()
    traced = _cached_trace(gm, example_inputs, opts, graph_report) if plan_cache else None
    if traced is None:
        traced = trace_inference_graph(gm, example_inputs, decomposition_table())
        if traced.graph is not None and graph_report.trace_key:
            from .trace_cache import store_trace

            store_trace(str(opts.cache_dir), graph_report.trace_key, traced.graph, traced.static, traced.written,
                        traced.returns_written)
    graph_report.trace_seconds = time.perf_counter() - start
    if traced.graph is None:
        graph_report.aten_trace = f"aot_autograd ({traced.reason})"
        return None
    graph_report.aten_trace = "one trace"
    _report.bump("one_trace_graphs")
    written = traced.written
    # What AOT's metadata would say of this graph (no output aliases; which inputs it writes) was
    # checked by the trace, so a save needs only the graph itself to be picklable, and no write.
    save_problem = f"the graph writes input {written[0]}" if written else None
    boxed = _plan_or_eager(traced.graph, list(example_inputs), traced.static, names, opts, graph_report, None,
                           plan_cache, record, save_state, save_problem=save_problem,
                           written_back=_written_back_outputs(traced.graph, example_inputs, written))
    if not written:
        def run(*args: Any) -> Any:
            return boxed(list(args))

        return run
    return _copying_back(boxed, gm, written, traced.returns_written, traced.static, len(example_inputs))


def _written_back_outputs(aten_gm: torch.fx.GraphModule, inputs: Sequence[Any],
                          written: Sequence[int]) -> list[tuple[int, int]]:
    """The (graph output, input) pairs of a one-trace graph's written inputs (their new values are
    its last outputs) whose output has the input's shape, strides and dtype: those the plan may
    write in place (runtime::CompileOptions::writtenBackInputs), as for AOT's graphs."""
    if not written:
        return []
    outputs = next(n for n in reversed(aten_gm.graph.nodes) if n.op == "output").args[0]
    first = len(outputs) - len(written)
    pairs = []
    for j, inp in enumerate(written):
        node, real = outputs[first + j], inputs[inp]
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if (isinstance(value, torch.Tensor) and value.dtype == real.dtype and tuple(value.shape) == tuple(real.shape)
                and value.stride() == real.stride()):
            pairs.append((first + j, inp))
    return pairs


def _copying_back(boxed: Callable, gm: torch.fx.GraphModule, written: list[int],
                  returns_written: Sequence[tuple[int, int]], static: Sequence[int], num_inputs: int) -> Callable:
    """The call of a one-trace graph that writes inputs: the plan returns their new values last,
    and they are copied into the inputs, in order, as AOT's runtime wrapper does (no copy where the
    plan wrote the input in place and returned it). The trace assumed the inputs it saw: a written
    input sharing memory with another argument at run time (Dynamo guards object identity, not
    overlap) runs Dynamo's graph eagerly instead, which writes exactly as eager. Parameters are not
    compared (one written would change its version, which the plan set checks). Where Dynamo's
    graph returns a written input itself (``returns_written``), the input is returned, after its
    copy-back, as eager returns the tensor it updated."""
    static_set = set(static)
    written_set = set(written)
    others = [i for i in range(num_inputs) if i not in static_set and i not in written_set]

    def overlapping(args: Sequence[Any]) -> bool:
        # (Per call: a first form of this check took 0.18 ms of a 42 ms Qwen decode step.)
        written_ptrs = {args[i].untyped_storage().data_ptr() for i in written}
        if len(written_ptrs) < len(written):
            return True
        for i in others:
            t = args[i]
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in written_ptrs:
                return True
        return False

    def run(*args: Any) -> Any:
        if overlapping(args):
            return gm(*args)
        outs = boxed(list(args))
        first = len(outs) - len(written)
        for j, inp in enumerate(written):
            new, old = outs[first + j], args[inp]
            if new is not old:
                old.copy_(new)
        result = outs[:first]
        for position, inp in returns_written:  # (in increasing position order)
            result.insert(position, args[inp])
        return result

    return run


def _cached_trace(gm: torch.fx.GraphModule, example_inputs: list, opts: Options,
                  graph_report: _report.GraphReport) -> Any:
    """The ATen graph an earlier process traced for this Dynamo graph and these inputs, from the
    trace cache under ``cache_dir`` (trace_cache.py); None when it has none (the key is noted in
    the report, so that the fresh trace is stored under it)."""
    from .aten_trace import OneTrace, static_indices, trace_problem
    from .trace_cache import load_trace, trace_key

    if not opts.cache_dir or trace_problem(gm, example_inputs):
        return None
    static = static_indices(gm)
    key = trace_key(gm, example_inputs, static)
    if key is None:
        return None
    graph_report.trace_key = key
    hit = load_trace(str(opts.cache_dir), key)
    if hit is None or hit[1] != static:
        return None
    graph_report.trace_source = "trace cache"
    _report.bump("trace_cache_hits")
    return OneTrace(hit[0], static, written=hit[2], returns_written=hit[3])


def _plan_or_eager(aten_gm: torch.fx.GraphModule, inputs: list, static: list[int], names: list[str], opts: Options,
                   graph_report: _report.GraphReport, shape_facts: Any, plan_cache: bool, record: bool,
                   save_state: Any, save_problem: Optional[str],
                   written_back: Sequence[tuple[int, int]] = ()) -> Callable:
    """The boxed callable for one ATen graph, from either path: its plan behind the shape guards,
    or the graph run eagerly when the lowering or the planner cannot take it. ``save_problem``
    is why the graph could not be saved beyond its own picklability (AOT's metadata)."""
    from functorch.compile import make_boxed_func

    from .guards import attach_shape_guards
    from .lowering import LoweringError

    try:
        runner = CompiledGraphRunner(aten_gm, inputs, set(static), names, opts, graph_report, shape_facts,
                                     plan_cache=plan_cache, record=record, written_back=written_back)
    except LoweringError as err:
        return make_boxed_func(_fallback(aten_gm, err.reason, opts, graph_report, op=err.node))
    except _unsupported_error() as err:
        return make_boxed_func(_fallback(aten_gm, str(err), opts, graph_report))
    if save_state is not None:
        from .saved import graph_problem

        save_state.reason = save_problem or graph_problem(aten_gm)
        save_state.aot_gm, save_state.static, save_state.names = aten_gm, static, names
        save_state.options, save_state.runner = dataclasses.asdict(opts), runner
    # A violated shape guard runs the graph eagerly, or raises ShapeGuardError under strict.
    return attach_shape_guards(runner, aten_gm, graph_report, opts.strict)


def _compile_with_aot(gm: torch.fx.GraphModule, example_inputs: list, names: list[str], opts: Options,
                      graph_report: _report.GraphReport, save_state: Any = None, plan_cache: bool = False,
                      record: bool = False) -> Callable:
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._guards import TracingContext

    start = time.perf_counter() - graph_report.trace_seconds

    def training_compiler(aot_gm: torch.fx.GraphModule, _inputs: list) -> Callable:
        # Only reached if autograd is needed after all (an input requiring grad slipped through).
        _fallback(aot_gm, "autograd graph (training); verifuse compiles inference only", opts, graph_report)
        return make_boxed_func(aot_gm.forward)

    def inference_compiler(aot_gm: torch.fx.GraphModule, fake_inputs: list) -> Callable:
        graph_report.trace_seconds = time.perf_counter() - start  # AOT's traces (a failed one-trace's too)
        context = TracingContext.try_get()
        meta = getattr(context, "fw_metadata", None) if context is not None else None
        static = sorted(meta.static_input_indices) if meta is not None else []
        real_inputs, real_names = _flatten_subclasses(example_inputs, names)
        lifted = _lifted_parameters(gm, context, len(fake_inputs) - len(real_inputs))
        if lifted is not None:
            real_inputs, real_names = lifted[0] + real_inputs, lifted[1] + real_names
        problem = _freezing_problem(fake_inputs, real_inputs, static, meta)
        if problem:
            return make_boxed_func(_fallback(aot_gm, problem, opts, graph_report))
        from .guards import collect_shape_facts
        from .saved import inference_problem

        # Dynamic shapes: Dynamo's shape guards go to C++ with the compile request, which derives
        # the plan's shape assumptions, decides them and checks the ones that do not follow on
        # every call (None for static shapes).
        shape_facts = collect_shape_facts(fake_inputs, real_inputs, static, graph_report, opts.strict)
        return _plan_or_eager(aot_gm, real_inputs, static, real_names, opts, graph_report, shape_facts,
                              plan_cache, record, save_state, save_problem=inference_problem(meta),
                              written_back=_written_back_inputs(aot_gm, fake_inputs, meta))

    compiler = aot_autograd(
        fw_compiler=training_compiler,
        inference_compiler=inference_compiler,
        decompositions=decomposition_table(),
        keep_inference_input_mutations=False,
    )
    # aot_compile turns on AOT's bundled, forced, strict autograd cache, which only stores
    # inductor's OutputCode: verifuse's graph is saved by saved.SavedGraph instead.
    with torch._functorch.config.patch(bundled_autograd_cache=False, force_autograd_cache=False,
                                       strict_autograd_cache=False):
        return compiler(gm, example_inputs)


def _under_aot_compile() -> bool:
    """True while torch's aot_compile calls the backend (it turns the bundled autograd cache on
    around that call): only then, or with the plan cache, is the plan recorded, since recording
    reads every byte of every weight once (its content fingerprint)."""
    return bool(getattr(torch._functorch.config, "bundled_autograd_cache", False))


def _plan_cache_wanted(options: Optional[dict]) -> bool:
    """The plan cache is used when the user chose a cache_dir (the option or VERIFUSE_CACHE_DIR),
    not with the default one every process shares: a plan record holds the optimized graph's
    text (tens of KB per graph and weights), and the store keeps every record it is given."""
    return bool(options and options.get("cache_dir")) or bool(os.environ.get("VERIFUSE_CACHE_DIR"))


_ENVIRONMENTS: dict = {}


def _environment(opts: Options) -> str:
    """saved.environment, once per options and thread count (it stats the extension)."""
    key = (opts, torch.get_num_threads())
    env = _ENVIRONMENTS.get(key)
    if env is None:
        from .saved import environment

        env = _ENVIRONMENTS[key] = environment(opts)
    return env


def _pass_through_exceptions() -> tuple:
    from torch._dynamo.exc import RestartAnalysis, SkipFrame

    return (VerifuseError, RestartAnalysis, SkipFrame)


def _unsupported_error() -> type:
    from . import _C

    return _C.UnsupportedError


def _fill_report(graph_report: _report.GraphReport, cpp: dict) -> None:
    """Takes the C++ compile report (driver::CompileReport, keys named like GraphReport's fields)
    as it is, and feeds the process-wide counters."""
    for name in _REPORT_FIELDS & cpp.keys():
        setattr(graph_report, name, cpp[name])
    for counter in ("rules_matched", "rules_applied", "rules_refused", "onednn_steps"):
        _report.bump(counter, int(cpp[counter]))
    _report.bump("rules_proved", sum(1 for p in cpp["proofs"] if p["verdict"] == "Proved"))
    # Saved plans (issue 18): a replayed plan ran no Z3 query and no timing; these say so.
    _report.bump("solver_queries", int(cpp.get("solver_queries", 0)))
    _report.bump("timings_run", int(cpp["timings_run"]))
    source = cpp.get("plan_source", "compiled")
    _report.bump({"plan-cache": "plan_cache_hits", "saved-plan": "plans_loaded"}.get(source, "plans_compiled"))
    if "refused" in cpp.get("plan_note", ""):
        _report.bump("plans_refused")


_REPORT_FIELDS = frozenset(f.name for f in __import__("dataclasses").fields(_report.GraphReport))


def _flatten_subclasses(inputs: list, names: Sequence[str]) -> tuple[list, list[str]]:
    """The inputs as aot_autograd's graph takes them: a tensor subclass (torchao's quantized
    weights: Int8Tensor, AffineQuantizedTensor) is desugared into its inner tensors, recursively,
    in ``__tensor_flatten__``'s order, which is the order AOT uses (its runtime wrapper unwraps the
    same way before every call). Plain inputs pass through, so the list is unchanged without
    subclasses. Names follow: ``<weight name>.<attribute>``."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    flat: list = []
    flat_names: list[str] = []

    def add(x: Any, name: str) -> None:
        if isinstance(x, torch.Tensor) and is_traceable_wrapper_subclass(x):
            attrs, _ = x.__tensor_flatten__()
            for attr in attrs:
                add(getattr(x, attr), f"{name}.{attr}")
        else:
            flat.append(x)
            flat_names.append(name)

    for x, name in zip(inputs, names):
        add(x, name)
    return flat, flat_names


def _lifted_parameters(gm: torch.fx.GraphModule, context: Any, extra: int) -> Optional[tuple[list, list[str]]]:
    """The parameters and buffers aot_autograd put in front of Dynamo's inputs, with their names.

    Dynamo normally passes parameters as graph inputs. With inductor's freezing flag on
    (``torch._inductor.config.freezing = True``, a common setting for CPU inference) it keeps them
    as attributes of the graph module instead, and aot_autograd lifts them back as its first inputs:
    parameters then buffers (aot_module_simplified's order, also in TracingContext.params_flat).
    None unless exactly those account for the extra inputs."""
    if extra <= 0 or context is None:
        return None
    params = dict(gm.named_parameters(remove_duplicate=False))
    buffers = dict(gm.named_buffers(remove_duplicate=False))
    tensors = [*params.values(), *buffers.values()]
    flat = getattr(context, "params_flat", None)
    if flat is None or len(flat) != len(tensors) or any(a is not b for a, b in zip(flat, tensors)):
        return None
    lifted, lifted_names = _flatten_subclasses(tensors, [*params.keys(), *buffers.keys()])
    return (lifted, lifted_names) if len(lifted) == extra else None


def _written_back_inputs(aot_gm: torch.fx.GraphModule, fake_inputs: list, meta: Any) -> list[tuple[int, int]]:
    """The (graph output, input) pairs aot_autograd's runtime wrapper copies back after each call:
    the new value of every input the graph writes (a static KV cache's ``index_copy_``), which are
    the graph's first outputs. The plan may then write such an input in place and hand the input
    itself back, so the copy does nothing (runtime::CompileOptions::writtenBackInputs). Only
    plain data writes whose output has the input's own shape, strides and dtype are listed."""
    if meta is None or len(meta.input_info) != len(fake_inputs):
        return []
    outputs = next(n for n in reversed(aot_gm.graph.nodes) if n.op == "output").args[0]
    if not isinstance(outputs, (tuple, list)):
        return []
    pairs = []
    for out_index, inp in enumerate(getattr(meta, "mutated_inp_runtime_indices", None) or []):
        info = meta.input_info[inp]
        if (not info.mutates_data or info.mutates_metadata or getattr(info, "mutates_storage_metadata", False)
                or out_index >= len(outputs)):
            continue
        node, fake = outputs[out_index], fake_inputs[inp]
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if (isinstance(value, torch.Tensor) and isinstance(fake, torch.Tensor) and value.dtype == fake.dtype
                and tuple(value.shape) == tuple(fake.shape) and value.stride() == fake.stride()):
            pairs.append((out_index, inp))
    return pairs


def _freezing_problem(fake_inputs: list, real_inputs: list, static: list[int], meta: Any) -> Optional[str]:
    """Parameters and buffers are frozen by mapping AOT's static input indices back to the real
    tensors Dynamo passed. The mapping must be one to one, or freezing would bind wrong weights."""
    if meta is None:
        return "aot_autograd gave no input metadata, so parameters cannot be frozen safely"
    if len(fake_inputs) != len(real_inputs):
        return (f"aot_autograd changed the input list ({len(real_inputs)} inputs became {len(fake_inputs)}: "
                "aliased or duplicated inputs), so parameters cannot be mapped one to one")
    for i in static:
        real, fake = real_inputs[i], fake_inputs[i]
        if not isinstance(real, torch.Tensor) or not isinstance(fake, torch.Tensor):
            return f"static input {i} is not a tensor"
        if tuple(real.shape) != tuple(fake.shape) or real.dtype != fake.dtype:
            return f"static input {i} does not match its traced shape/dtype"
        info = meta.input_info[i]
        if getattr(info, "mutates_data", False) or getattr(info, "mutates_metadata", False):
            return (f"the graph mutates parameter/buffer input {i} (a module in training mode, e.g. "
                    "BatchNorm updating running statistics?); call model.eval()")
    return None


_EXIT_WAIT_REGISTERED = False


def _wait_for_background_work_at_exit(c_module: Any) -> None:
    """Plans pack their GEMM weights on a background thread once built: at interpreter exit, wait
    for it before C++ tears down the objects that work uses (registered once)."""
    global _EXIT_WAIT_REGISTERED
    if not _EXIT_WAIT_REGISTERED:
        import atexit

        atexit.register(c_module.wait_for_deferred_work)
        _EXIT_WAIT_REGISTERED = True


class CompiledGraphRunner:
    """The boxed callable AOT runs: one C++ plan, refreshed when a frozen weight changes.

    Weight guard: the C++ plan checks every frozen argument's identity, data pointer and version
    counter on each call (Dynamo's guards never look at weight data). On a mismatch the graph is
    lowered again against the current tensors, so ``load_state_dict`` or an in-place update is
    picked up on the next call instead of serving stale results.

    Copies of one model (two fine-tuned variants of an architecture, replicas in one server
    process) share Dynamo's graph, which passes each copy's weights as arguments: up to _MAX_PLANS
    plans are kept, one per set of weights, most recently used first, so calling the copies in
    turn switches plans instead of rebuilding one on every call (measured: 117 ms against 4 ms per
    Llama decode step). A plan whose weights were modified in place can never match again and is
    dropped. Which plan runs is decided in C++ (_C.PlanSet, runtime/plan_set.h) from the plans'
    status codes; this class only builds the plans it asks for (the lowering is Python).
    """

    _MAX_PLANS = 4

    _boxed_call = True

    def __init__(self, aot_gm: torch.fx.GraphModule, real_inputs: list, static: set[int], names: list[str],
                 opts: Options, graph_report: _report.GraphReport, shape_facts: Any = None,
                 saved_plan: Optional[bytes] = None, plan_cache: bool = False, record: bool = False,
                 written_back: Sequence[tuple[int, int]] = ()):
        self._aot_gm = aot_gm
        self._written_back = list(written_back)  # _written_back_inputs
        self._static = static
        self._names = names
        self._opts = opts
        self._plan_cache = plan_cache and bool(opts.cache_dir)
        self._record = record or self._plan_cache  # the first build records its plan for a save
        self._shape_facts = shape_facts  # guards.ShapeFacts under dynamic shapes
        self._graph_report = graph_report
        self._lock = threading.Lock()
        from . import _C

        self._stale_weights_error = _C.StaleWeightsError  # looked up once, not per call
        self._needs_exact_error = _C.NeedsExactPlanError
        self._ran = False
        plan, cpp_report = self._build(real_inputs, saved_plan)
        # The added shape guards (C++), checked before every run; None when nothing is checked.
        # Every plan of this runner is built from the same graph and shape facts: the same guards.
        self.shape_check = cpp_report.get("shape_check")
        self._plans = _C.PlanSet(plan, self._MAX_PLANS)
        self._note_plan(cpp_report, saved_plan is not None)
        _fill_report(graph_report, cpp_report)
        # int8 ops choose their kernels at their first run: the report asks the current plan then.
        runner = weakref.ref(self)
        graph_report.int8_kernels_of = lambda: runner()._plan.int8_kernels() if runner() is not None else []
        # verifuse.profile reads the current plan's per-node times.
        graph_report.plan_of = lambda: runner()._plan if runner() is not None else None

    @property
    def _plan(self) -> Any:
        """The plan the next call tries first."""
        return self._plans.current()

    def _note_plan(self, cpp_report: dict, loading: bool) -> None:
        # The plan as a record (saved.py serializes it), and why it was not saved or was refused.
        self.saved_plan = cpp_report.pop("saved_plan", None)
        self.plan_note = cpp_report.get("plan_note", "")
        if loading and cpp_report.get("plan_source") != "saved-plan":
            from .saved import VerifusePlanWarning

            warnings.warn(f"verifuse: {self.plan_note}", VerifusePlanWarning, stacklevel=2)

    def _build(self, real_inputs: Sequence[Any], saved_plan: Optional[bytes] = None) -> tuple:
        from . import _C

        _wait_for_background_work_at_exit(_C)
        from .lowering import lower_graph

        from torch._dispatch.python import no_python_dispatcher
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        # The first build runs inside AOT tracing, where FakeTensorMode is active on this thread:
        # tensors the C++ plan creates up front (wrapped scalars, folded constants) must be real.
        # AOT also turns on the Python dispatcher, which would route every ATen call the planner
        # makes (folding constants, timing candidate engines) through Python: slower compiles and
        # ATen timings inflated by interpreter overhead that the compiled graph never pays.
        from .installed_proofs import seed_cache

        with unset_fake_temporarily(), no_python_dispatcher():
            facts = self._shape_facts
            start = time.perf_counter()
            lowered = lower_graph(self._aot_gm, real_inputs, self._static, self._names, facts)
            self._graph_report.lowering_seconds = time.perf_counter() - start
            opts = self._opts
            if opts.cache_dir:
                seed_cache(str(opts.cache_dir))  # the rule proofs made at install time
            # The driver reads the benchmarking knobs (VERIFUSE_ENGINE, VERIFUSE_LINEAR_WEIGHTS).
            return _C.optimize_and_compile(
                lowered.graph, lowered.input_arg_index, lowered.frozen, lowered.num_args,
                verify=opts.verify, fuse=True, engines="auto", bf16=opts.dtype == "bfloat16",
                cache_dir=str(opts.cache_dir) if opts.cache_dir else "",
                planted_bug=os.environ.get("VERIFUSE_TEST_PLANTED_BUG") == "1",
                autotune=opts.autotune, layer_check_weights=opts.layer_check_weights,
                linear_weights=opts.linear_weights,
                shape_facts=facts.cpp if facts is not None else None,
                environment=_environment(opts) if self._record or saved_plan is not None else "",
                saved_plan=saved_plan, plan_cache=self._plan_cache, written_back=self._written_back)

    def __call__(self, args: list) -> list:
        _report.observe(self._graph_report)
        if self.shape_check is not None:
            self.shape_check.check(args)  # raises _C.ShapeGuardViolation before anything runs
        first = not self._ran
        start = time.perf_counter() if first else 0.0
        out = self._run(args)
        if first:
            # The first run's own time (int8 kernels are chosen, weights' lazy copies made): part of
            # a first call's split in the report.
            self._ran = True
            self._graph_report.first_run_seconds = time.perf_counter() - start
        args.clear()  # boxed convention: release the inputs early
        return list(out)

    def _run(self, args: list) -> Any:
        """Runs the plan set, building what it asks for: a plan for weights none of its plans was
        built for (StaleWeightsError), the exact plan (NeedsExactPlanError). Each build answers
        one request, so three rounds always suffice."""
        for _ in range(3):
            try:
                return self._plans.run(args)
            except self._needs_exact_error:
                # The fused plan already failed on these inputs: only the exact plan runs again.
                self._plans.set_exact(self._build_exact(args))
                try:
                    return self._plans.run_exact(args)
                except self._needs_exact_error:
                    continue
            except self._stale_weights_error:
                with self._lock:
                    current = self._plans.current()
                    if current is not None and current.weights_match(args):
                        continue  # another thread built it meanwhile
                    plan, cpp_report = self._build(args)
                    self._note_plan(cpp_report, False)
                    self._plans.add(plan)
                    _report.bump("weight_refreshes")
        return self._plans.run(args)

    def _build_exact(self, args: list) -> Any:
        """The unfused ATen plan: for inputs the oneDNN plan hands back (NaN/Inf values need
        torch's NaN semantics, and the fused ops keep only prepacked weights)."""
        from . import _C
        from .lowering import lower_graph

        with self._lock:
            lowered = lower_graph(self._aot_gm, args, self._static, self._names)
            exact, _ = _C.optimize_and_compile(
                lowered.graph, lowered.input_arg_index, lowered.frozen, lowered.num_args,
                verify="off", fuse=False, engines="aten", autotune=False)
            _report.bump("exact_plans_built")
            return exact
