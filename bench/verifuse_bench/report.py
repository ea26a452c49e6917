"""Writing results: strict JSON, the markdown table and (plot.py) the PNG next to them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .backends import INDUCTOR_VARIANT_MARKS, INDUCTOR_VARIANTS

PEER_COLUMNS = ("inductor", "openvino", "zentorch")
BF16_FACTOR = 2.0  # harness.BF16_OWN_ERROR_FACTOR (not imported: report.py needs no torch)


def _finite(o: Any) -> Any:
    """Strict JSON: NaN / inf become null."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    try:
        import torch

        if isinstance(o, torch.Size):
            return list(o)
    except Exception:  # pragma: no cover
        pass
    return repr(o)


def dumps(data: Any) -> str:
    return json.dumps(_finite(data), indent=2, default=_json_default, allow_nan=False)


def _fmt(v: Any, spec: str = ".3f", none: str = "–") -> str:
    if v is None:
        return none
    if isinstance(v, float) and not math.isfinite(v):
        return none
    return format(v, spec)


def _ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.2f}" if v < 100 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def _tier_line(env: dict[str, Any]) -> str:
    """Which tier the numbers are: the CPU's own, or capped (and then what each peer saw)."""
    tier = env.get("tier") or {}
    if not tier:
        return "not recorded (a run before the capability model)"
    if not tier.get("cap"):
        return f"`{tier.get('tier')}`, the CPU's own (oneDNN `{tier.get('onednn_isa')}`)"
    caps = ", ".join(f"{k}={v}" for k, v in (env.get("isa_caps") or {}).items())
    return (f"`{tier.get('tier')}`, **capped** on a `{tier.get('cpu_tier')}` CPU ({caps}): verifuse, eager, inductor "
            "(MKL too) and OpenVINO's oneDNN kernels run that tier's code; OpenVINO's own (non-oneDNN) kernels and "
            "zentorch cannot be capped")


def _header(report: dict[str, Any]) -> list[str]:
    env = report["environment"]
    s = report["settings"]
    suites = ", ".join(report.get("suites") or [])
    cpu = f"`{env.get('cpu_model')}`"
    bits = []
    if env.get("cpu_vendor"):
        bits.append(f"{env.get('cpu_vendor')} family {env.get('cpu_family')} model {env.get('cpu_model_number')}")
    if env.get("cpu_microarch"):
        bits.append(env["cpu_microarch"])
    if env.get("hypervisor"):
        bits.append("virtual machine")
    dtype = s.get("dtype", "float32")  # runs before --dtype existed were float32
    lines = [
        f"# verifuse bench — {suites} — {dtype} — {report['created']}",
        "",
        f"- **CPU**: {cpu} ({'; '.join(bits)}), {env.get('cpu_count')} logical CPUs. "
        f"ISA: {(env.get('isa_summary') or ', '.join(env.get('cpu_flags') or [])).replace('no AVX-512', '**no AVX-512**')} "
        f"(flags seen: {', '.join(env.get('cpu_flags') or []) or 'none'})",
        f"- **tier measured**: {_tier_line(env)}",
        f"- torch {env.get('torch_version')}, python {env.get('python_version')}, commit {env.get('git_commit')}; "
        f"{env.get('isolation', '')}",
        f"- load average at start {env.get('load_avg')}, at end {env.get('load_avg_end')} "
        "(per configuration in the JSON: `load_avg_before/after`)",
        f"- {s['iters']} timed calls per backend (round-robin, chunks of {s['chunk']}, rotating order), "
        f"{s['warmup']} warm-up calls after the compile call, time budget {s['time_budget_s']:.0f} s per "
        f"configuration, inductor cache {s['inductor_cache']}, verifuse cache {s.get('verifuse_cache', 'default')} "
        f"(cold: its own empty cache_dir per configuration; compile_warm_s in the JSON: a second compile "
        f"from it), seed {s['seed']}",
        f"- dtype **{dtype}**" + (
            "" if dtype == "float32" else INT8_HEADER if dtype == "int8" else
            ": every model `.to(torch.bfloat16)`, its floating-point inputs too (token ids stay int64); the "
            "reference is eager bf16. *err vs eager / eager's own bf16 err* = a backend's max abs diff vs eager "
            "bf16 divided by eager bf16's own max abs diff vs eager float32 (same bf16-rounded weights and inputs, "
            f"upcast); accurate when <= {BF16_FACTOR:g} (above that the backend is provably further from float32 "
            "than eager bf16 is)"),
        "- inductor = `torch.compile(backend='inductor')` with freezing on at trace time (verified from the "
        "generated code), `inductor-nofreeze`, `inductor-max-autotune` (max_autotune + freezing) and "
        "`inductor-cpp-wrapper` (cpp_wrapper + freezing), those of them this run had; the **inductor** column "
        "is the fastest accurate one (`nf` = without freezing, `ma` = max-autotune, `cw` = cpp_wrapper)",
    ]
    if report.get("partial"):
        p = report["partial"]
        lines.append(f"- **partial result**: {p['done']} of {p['total']} configurations done")
    for name, b in report.get("backends", {}).items():
        if b.get("status") != "available":
            lines.append(f"- **{name} unavailable**: {b.get('reason')}")
            continue
        extra = []
        if b.get("version"):
            extra.append(f"version {b['version']}")
        if name == "openvino":
            hint = {"float32": "f32", "bfloat16": "bf16", "int8": "f32"}.get(dtype, "?")
            extra.append(f"`options={{'aot_autograd': True, 'config': {{'INFERENCE_PRECISION_HINT': '{hint}', "
                         "'INFERENCE_NUM_THREADS': <threads>}}`")
            if dtype == "bfloat16":
                extra.append("it runs the float32 upcast of the bf16 model and inputs with the bf16 hint (its "
                             "torch.compile backend cannot take bfloat16 tensors: it would run them in PyTorch)")
        if name == "zentorch":
            extra.append("freezing on at trace time")
        if b.get("note"):
            extra.append(f"**note: {b['note']}**")
        if extra:
            lines.append(f"- {name}: " + "; ".join(extra))
    tv = env.get("torchvision")
    if tv:
        if tv.get("ok"):
            how = (f"op-schema shim (its compiled ops do not load: {tv.get('compiled_ops_error')})"
                   if tv.get("shim_defined") else "its compiled ops loaded")
            lines.append(f"- torchvision {tv.get('version')} from {tv.get('path')} ({tv.get('source')}), {how}")
        else:
            lines.append(f"- torchvision unavailable: {tv.get('reason')}")
    plot = report.get("plot")
    if plot:
        if plot.get("status") == "ok":
            lines += ["", f"![speed-up and compile time]({Path(plot['path']).name})"]
        else:
            lines.append(f"- plot not written: {plot.get('reason')}")
    return lines


def _peer_cell(e: dict[str, Any], col: str) -> str:
    bs = e["backends"]
    if col == "inductor":
        best = e["ratios"].get("inductor_best")
        if best:
            cell = _ms(bs[best]["latency_ms"]["median"])
            mark = INDUCTOR_VARIANT_MARKS.get(best, "")
            return cell + (f" {mark}" if mark else "")
        names = [n for n in INDUCTOR_VARIANTS if n in bs]
        return _status_cell(bs[names[0]]) if names else "–"
    if col not in bs:
        return "–"
    b = bs[col]
    if b.get("status") != "ok":
        return _status_cell(b)
    cell = _ms(b["latency_ms"]["median"])
    if b.get("accuracy") and not b["accuracy"].get("ok"):
        cell += " (acc!)"
    # the time is (partly) eager's: say so where the speed-ups are read
    if (b.get("verifuse_stats_delta") or {}).get("graphs_fallback"):
        cell += " (eager fallback)"
    if b.get("ran_in_pytorch"):
        cell += " (ran in PyTorch)"
    return cell


def _status_cell(b: dict[str, Any]) -> str:
    return {"unavailable": "n/a", "failed": "failed"}.get(b.get("status"), b.get("status") or "–")


def to_markdown(report: dict[str, Any]) -> str:
    lines = _header(report)
    backends = list(report["settings"]["backends"])
    results = report.get("results", [])
    cols = [c for c in PEER_COLUMNS if c in backends or (c == "inductor" and any(v in backends for v in INDUCTOR_VARIANTS))]
    has_vf = "verifuse" in backends
    # ---- headline table ------------------------------------------------------------------------
    dtype = report["settings"].get("dtype", "float32")
    bf16 = dtype != "float32"  # bf16 or int8: judged against eager's own error against float32
    int8 = dtype == "int8"
    short = "int8" if int8 else "bf16"
    lines += ["", "## verifuse vs the best peer" + (f" ({report['settings']['dtype']})" if bf16 else ""), "",
              "Median latency in ms per call. *best peer* = the fastest of inductor (its fastest accurate variant: default with freezing, without freezing, max-autotune, cpp_wrapper, those the run had), "
              "OpenVINO and zentorch with accurate results; *verifuse vs best peer* = best peer's median / "
              "verifuse's median (> 1: verifuse is faster), with its 95% bootstrap interval and the verdict: "
              "**win** when the interval lies above 1, **loss** below 1, otherwise **tie**. The interval is paired "
              "by round where the run had at least 5 rounds (`--chunk 1` gives one per timed call): each round's "
              "best-peer / verifuse ratio, its calls seconds apart, so the host's drift over minutes cancels; "
              "the bootstrap is over rounds, and *P(faster)* = the share of rounds verifuse won. Otherwise the "
              "calls are resampled as independent and *P(faster)* = the chance that a verifuse call beats a "
              "best-peer call (each row's `verdict_method` in the JSON says which). A verifuse row that fails "
              "the accuracy check is FAILED, whatever its speed, and is left out of the geomeans.", ""]
    head = ["model", "batch", "thr", "eager"] + cols + (["verifuse"] if has_vf else []) + ["best peer"]
    if has_vf:
        head += ["verifuse vs best peer", "95% interval", "verdict", "P(faster)"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---", "---:", "---:"] + ["---:"] * (len(head) - 3)) + "|")
    for e in results:
        bs, r = e["backends"], e["ratios"]
        row = [e["model"], str(e["batch"]), str(e["threads"]), _peer_cell(e, "eager") if "eager" in bs else "–"]
        row += [_peer_cell(e, c) for c in cols]
        if has_vf:
            row.append(_peer_cell(e, "verifuse"))
        row.append(r.get("best_peer") or "–")
        if has_vf:
            v, ci = r.get("verifuse_vs_best_peer"), r.get("verifuse_vs_best_peer_ci")
            if r.get("verifuse_failed"):
                row += [f"FAILED ({r['verifuse_failed']})", "–", "failed", "–"]
            else:
                row += [f"**{v:.2f}x**" if v else "–", f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "–",
                        r.get("verdict") or "–",
                        _fmt(r.get("verifuse_win_probability"), ".2f")]
        lines.append("| " + " | ".join(row) + " |")
    # ---- geomeans --------------------------------------------------------------------------------
    lines += ["", "## Geomeans", "",
              "Speed-up over eager (eager median / backend median) and verifuse vs the best peer, geometric "
              "mean over the configurations of each group. A backend missing on some configurations is left "
              "out of its geomean there; the cell then says how many it covers, e.g. `1.07 (4/5)`.", ""]
    gcols = [("inductor_best", "inductor")] + [(c, c) for c in cols if c != "inductor"]
    if has_vf:
        gcols.append(("verifuse", "verifuse"))
    head = ["suite", "batch", "thr", "scope", "n"] + [f"{t}/eager" for _, t in gcols]
    if has_vf:
        head += ["verifuse vs best peer", "wins / ties / losses (failed)", "compile verifuse/inductor",
                 "without Dynamo's trace", "compile verifuse/openvino"]
    head.append("best peer (configs)")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] * 4 + ["---:"] * (len(head) - 5) + ["---"]) + "|")
    for g in report.get("summary", {}).get("geomeans", []):
        nu = g.get("n_used", {})

        def cell(v, n):
            txt = _fmt(v, ".2f")
            return txt if v is None or n is None or n == g["n_configs"] else f"{txt} ({n}/{g['n_configs']})"

        row = [str(g["suite"]), str(g["batch"]), str(g["threads"]), g["scope"], str(g["n_configs"])]
        row += [cell(g["speedup_vs_eager"].get(k), nu.get("speedup_vs_eager", {}).get(k)) for k, _ in gcols]
        if has_vf:
            v = g.get("verifuse_vs_best_peer")
            c = cell(v, nu.get("verifuse_vs_best_peer"))
            vd = g.get("verdicts") or {}
            wtl = f"{vd.get('win', 0)} / {vd.get('tie', 0)} / {vd.get('loss', 0)}" + (
                f" ({vd['failed']})" if vd.get("failed") else "")
            row += [f"**{c}**" if v else c, wtl] + [
                cell(g.get(k), nu.get(k)) for k in ("compile_ratio_verifuse_inductor",
                                                    "compile_ratio_verifuse_inductor_after_dynamo",
                                                    "compile_ratio_verifuse_openvino")]
        row.append(", ".join(f"{k} {n}" for k, n in sorted(g.get("best_peer_counts", {}).items())) or "–")
        lines.append("| " + " | ".join(row) + " |")
    # ---- raw rows --------------------------------------------------------------------------------
    own_txt = ("max abs diff of eager = eager bf16 vs eager float32 on the same bf16-rounded weights and inputs "
               "(its own bf16 error); of the others = vs eager bf16. " if bf16 and not int8 else "")
    if int8:
        own_txt = ("max abs diff of eager = eager int8 (the quantized graph run by PyTorch) vs the float32 model "
                   "(its own quantization error); of the others = vs eager int8. *vs f32* = max abs diff vs the "
                   "float32 model; *top-1* = argmax agreement with the float32 model (classifiers; benchmark input "
                   "and a few extra random inputs). ")
    lines += ["", "## All backends", "",
              own_txt + "compile s = the first call (Dynamo + backend compile + first run); Dynamo s = the part of "
              "it Dynamo spent tracing outside the backend (its compilation_time_metrics: the frame compile minus "
              "the backend call), the same work for every backend. peak RSS = process peak "
              "during that backend's compile and warm-up (reset before each backend), growth = RSS kept "
              "afterwards. CPU = process CPU time / wall time while timing (~1.0 per thread used).", "",
              "| model | batch | thr | backend | compile s | Dynamo s | median ms | p90 ms | vs eager | max abs diff | "
              + (f"err vs eager / eager's own {short} err | " if bf16 else "")
              + ("vs f32 | top-1 | " if int8 else "") + "peak RSS MB (growth) | CPU | notes |",
              "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if bf16 else "") + ("---:|---:|" if int8 else "")
              + "---:|---:|---|"]
    for e in results:
        for name, b in e["backends"].items():
            if b["status"] != "ok":
                lines.append(f"| {e['model']} | {e['batch']} | {e['threads']} | {name} | – | – | – | – | – | – | – | – | "
                             + ("– | " if bf16 else "") + ("– | – | " if int8 else "")
                             + f"{b['status']}: {_md_escape((b.get('reason') or '')[:160])} |")
                continue
            notes = _notes(name, b, e)
            sp = e["ratios"]["speedup_vs_eager"].get(name) if name != "eager" else 1.0
            acc = b.get("accuracy")
            mem = b.get("memory") or {}
            memtxt = "–"
            if mem.get("peak_rss_mb") is not None:
                memtxt = f"{mem['peak_rss_mb']:.0f} ({_fmt(mem.get('rss_growth_mb'), '+.0f')})"
            if name == "eager" and bf16:
                acc = e.get("eager_own_int8_error" if int8 else "eager_own_bf16_error")
            own_cell = ""
            if bf16:
                own_cell = ("1 (own)" if name == "eager" else
                            _fmt((b.get("accuracy") or {}).get("vs_eager_own_error"), ".2f")) + " | "
            if int8:
                a = acc or {}
                own_cell += (_fmt(a.get("max_abs_diff") if name == "eager" else a.get("max_abs_diff_vs_float32"),
                                  ".1e") + " | " + _fmt(a.get("top1_agreement_vs_float32"), ".3f") + " | ")
            iso = mem.get("isolated") or {}
            if iso.get("peak_rss_mb") is not None:
                notes.append(f"isolated peak RSS {iso['peak_rss_mb']:.0f} MB")
            lines.append(
                f"| {e['model']} | {e['batch']} | {e['threads']} | {name} | "
                f"{_fmt(b.get('compile_s'), '.2f') if name != 'eager' else '–'} | "
                f"{_fmt(b.get('dynamo_s'), '.2f') if name != 'eager' else '–'} | "
                f"{_ms(b['latency_ms']['median'])} | {_ms(b['latency_ms']['p90'])} | {_fmt(sp, '.2f')}x | "
                f"{_fmt((acc or {}).get('max_abs_diff'), '.1e') if acc else '–'} | {own_cell}{memtxt} | "
                f"{_fmt(b.get('cpu_utilization'), '.2f')} | {_md_escape('; '.join(notes))} |")
    if report.get("errors"):
        lines += ["", "## Errors", ""]
        for err in report["errors"]:
            where = " ".join(str(x) for x in (err.get("model"), err.get("batch") and f"b{err['batch']}",
                                               err.get("threads") and f"t{err['threads']}") if x)
            lines.append(f"- {where or 'run'} (stage {err.get('stage')}): {_md_escape(str(err.get('error')))}")
    lines.append("")
    return "\n".join(lines)


INT8_HEADER = (": the float32 model (random weights) quantized once per configuration with PT2E (torch.export, "
               "torchao X86InductorQuantizer: static per-tensor u8 activations, per-channel s8 weights, calibrated on "
               "a few random inputs) and the same quantized graph given to every backend; image inputs channels-last "
               "for all. The reference is eager running that graph. *err vs eager / eager's own int8 err* = a "
               "backend's max abs diff vs eager int8 divided by eager int8's max abs diff vs the float32 model; "
               f"accurate when <= {BF16_FACTOR:g}. A peer that did not run the quantized graph itself (INT8 NOT RUN) "
               "is left out of the best peer")


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _notes(name: str, b: dict[str, Any], e: dict[str, Any]) -> list[str]:
    notes = []
    fr = b.get("freezing")
    if fr is not None and b.get("freezing_config_at_trace"):
        notes.append(f"frozen params {fr.get('frozen_params')}, oneDNN ops {fr.get('onednn_op_calls')}"
                     + ("" if fr.get("verified") else " (freezing NOT verified)"))
        if fr.get("zentorch_ops"):
            notes.append(f"zentorch ops {sum(fr['zentorch_ops'].values())}")
    if b.get("joint_custom_post_pass_at_trace"):
        notes.append(f"joint_custom_post_pass set at trace: {b['joint_custom_post_pass_at_trace']}")
    if b.get("zentorch_log_records_during_compile"):
        notes.append(f"{b['zentorch_log_records_during_compile']} zentorch log records during compile")
    if name == "zentorch" and b.get("zentorch_optimize"):
        notes.append(f"zentorch passes: {b['zentorch_optimize']}")
    if name == "openvino":
        parts = b.get("partitions") or []
        if parts:
            ov = sum(p.get("openvino_subgraphs", 0) for p in parts)
            left = sum(sum(p.get("ops_left_to_pytorch", {}).values()) for p in parts)
            notes.append(f"{ov} OpenVINO subgraph(s), {left} op(s) left to PyTorch")
        if b.get("fell_back_to_inductor"):
            notes.append(f"{b['fell_back_to_inductor']} subgraph(s) fell back to inductor")
        if b.get("ran_in_pytorch"):
            notes.append(f"{b['ran_in_pytorch']} subgraph(s) RAN IN PYTORCH (OpenVINO execution failed: "
                         f"{(b.get('ran_in_pytorch_reasons') or ['?'])[0][:120]})")
        if b.get("bf16_via"):
            notes.append("bf16 via float32 upcast + bf16 hint")
    q = e.get("quantization") if name == "eager" else None
    if q:
        wl = q.get("weight_layers") or {}
        notes.append(f"quantized graph: {wl.get('int8_weights', '?')} int8-weight layers"
                     + (f", {wl['float_weights']} left float" if wl.get("float_weights") else "")
                     + (f", calibrated on {len(q.get('calibration_seeds') or [])} random inputs"))
    if b.get("int8_not_run"):
        notes.append("INT8 NOT RUN: " + b["int8_not_run"])
    elif "int8_kernels" in b:
        ops = (b.get("freezing") or {}).get("int8_ops") or b.get("int8_ops") or {}
        notes.append(("int8 kernels: " + ", ".join(f"{k} x{v}" for k, v in sorted(ops.items())))
                     if b["int8_kernels"] else "NO int8 kernels (quantize/dequantize around float ops)")
    if b.get("int8_note"):
        notes.append(b["int8_note"])
    if b.get("graphs") and b["graphs"] > 1:
        notes.append(f"{b['graphs']} graphs")
    if b.get("graph_breaks"):
        notes.append(f"{b['graph_breaks']} graph breaks")
    if b.get("recompiles_during_timing"):
        notes.append(f"RECOMPILED {b['recompiles_during_timing']}x while timing")
    acc = b.get("accuracy")
    if acc is not None and not acc.get("ok"):
        notes.append(f"ACCURACY rel {_fmt(acc.get('max_rel_diff'), '.2e')}" + (f" {acc['error']}" if acc.get("error") else "")
                     + (f", {_fmt(acc['vs_eager_own_error'], '.1f')}x eager's own "
                        f"{'int8' if e.get('dtype') == 'int8' else 'bf16'} error"
                        if acc.get("vs_eager_own_error") is not None else ""))
    delta = b.get("verifuse_stats_delta") or {}
    if delta.get("graphs_fallback"):
        notes.append(f"{delta['graphs_fallback']} graph(s) fell back to eager")
    if b.get("fallback_warnings"):
        notes.append("fallback: " + b["fallback_warnings"][0][:200])
    if e.get("time_budget_hit"):
        notes.append(f"budget hit (n={b['latency_ms']['n']})")
    return notes


def write_report(report: dict[str, Any], json_path: Path, plot: bool | None = None) -> tuple[Path, Path]:
    """JSON, the PNG (if ``plot``; default: the run's setting) and the markdown table, side by side."""
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    if plot is None:
        plot = bool(report.get("settings", {}).get("plot", True))
    if plot and report.get("results"):
        from .plot import write_plot

        report["plot"] = write_plot(report, json_path.with_suffix(".png"))
    tmp = json_path.with_suffix(json_path.suffix + ".tmp")
    tmp.write_text(dumps(report))
    tmp.replace(json_path)
    md_path = json_path.with_suffix(".md")
    md_path.write_text(to_markdown(report))
    return json_path, md_path
