#!/usr/bin/env python3
"""Benchmark: verifuse-shapes against plain z3 on SMT-LIB shape programs.

    python bench/shapes/bench_shapes.py CORPUS_DIR_OR_TAR [--z3-timeout 120] [--json out.json]
           [--all] [--no-verify] [--limit N]

For every file (distinct contents by default; --all for every file) it times `verifuse-shapes` and
plain `z3` on the unmodified file in the same run, alternating which goes first; runs verifuse again
with --redundant; and re-checks with python z3 every model (substituted into the original asserts)
and every reported redundancy (prefix: earlier asserts and not a_i is unsat). Writes JSON and a
markdown table under bench/results/. Never asserted on in CI.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def find_bin() -> str:
    exe = os.environ.get("VERIFUSE_SHAPES_BIN")
    if exe:
        return exe
    for cand in sorted(glob.glob(str(ROOT / "build" / "*" / "verifier" / "src" / "shapes" / "verifuse-shapes"))):
        return cand
    sys.exit("verifuse-shapes not found: build it or set VERIFUSE_SHAPES_BIN")


def corpus_files(src: Path) -> list[Path]:
    if src.is_dir():
        return sorted(src.rglob("*.smt2"))
    tmp = Path(tempfile.mkdtemp(prefix="shapes-corpus-"))
    with tarfile.open(src) as tf:
        tf.extractall(tmp, filter="data")
    return sorted(tmp.rglob("*.smt2"))


def run_z3(path: Path, timeout_s: int) -> tuple[str, float]:
    t = time.perf_counter()
    try:
        out = subprocess.run(["z3", f"-T:{timeout_s}", str(path)], capture_output=True, text=True,
                             timeout=timeout_s + 15)
        first = (out.stdout.strip().splitlines() or ["error"])[0].strip()
        verdict = first if first in ("sat", "unsat", "unknown", "timeout") else "error"
    except subprocess.TimeoutExpired:
        verdict = "timeout"
    return verdict, time.perf_counter() - t


def run_vf(exe: str, path: Path, extra: list[str]) -> tuple[dict | None, float, str]:
    t = time.perf_counter()
    try:
        out = subprocess.run([exe, str(path), *extra], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t, "timeout"
    dt = time.perf_counter() - t
    if out.returncode != 0:
        return None, dt, out.stderr.strip()
    return json.loads(out.stdout), dt, ""


def verify(path: Path, rep: dict, red: dict | None, check_timeout_ms: int, retry_timeout_ms: int = 10000,
           budget_s: float = 300.0) -> dict:
    import z3
    res = {"model_ok": None, "red_confirmed": 0, "red_unknown": 0, "red_refuted": 0}
    asserts = list(z3.parse_smt2_string(path.read_text()))
    if rep["verdict"] == "sat":
        consts, seen, stack = {}, set(), list(asserts)
        while stack:
            x = stack.pop()
            if x.get_id() in seen:
                continue
            seen.add(x.get_id())
            if z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
                consts[x.decl().name()] = x
            stack.extend(x.children())
        s = z3.Solver()
        s.set("timeout", 30000)
        s.add(asserts)
        ok = True
        for name, c in consts.items():
            if name not in rep["model"]:
                ok = False
                break
            v = Fraction(str(rep["model"][name]))
            if c.sort().kind() == z3.Z3_INT_SORT:
                s.add(c == z3.IntVal(v.numerator))
            elif c.sort().kind() == z3.Z3_BOOL_SORT:
                s.add(c == z3.BoolVal(bool(rep["model"][name])))
            else:
                s.add(c == z3.RealVal(f"{v.numerator}/{v.denominator}"))
        res["model_ok"] = ok and s.check() == z3.sat
    if red and red.get("redundancy"):
        # Prefix redundancy: a_1..a_{i-1} |= a_i, i.e. (earlier asserts) and not a_i is unsat. An
        # assert z3 has confirmed redundant is not added to the solver: it is implied by what is
        # already there, so the solver's content is unchanged and later checks stay small (most
        # asserts are redundant). Unknowns (incremental z3, check_timeout_ms) are retried with a
        # fresh, non-incremental solver (z3's preprocessing runs there) and a longer timeout.
        marked = {a["index"] for a in red["redundancy"]["asserts"]}
        deadline = time.perf_counter() + budget_s  # past it, the rest counts as unchecked
        group_timeout_ms = min(500, check_timeout_ms)
        s = z3.Solver()
        s.set("timeout", check_timeout_ms)
        kept: list[int] = []
        retry: list[tuple[int, int]] = []  # (assert index, how many kept asserts precede it)

        def check_group(group: list[int]) -> None:
            # Every assert of a run of consecutive marked asserts is implied by the same solver
            # content (the ones before it in the run are implied by it), so one query
            # (content and not (a_i and ... and a_k)) unsat confirms the whole run; otherwise
            # split it in halves, adding what is not confirmed to the solver.
            if time.perf_counter() > deadline:
                res["red_unchecked"] = res.get("red_unchecked", 0) + len(group)
                return
            s.push()
            s.set("timeout", group_timeout_ms if len(group) > 1 else check_timeout_ms)
            s.add(z3.Not(z3.And([asserts[j] for j in group])) if len(group) > 1 else z3.Not(asserts[group[0]]))
            r = s.check()
            s.pop()
            res["red_queries"] = res.get("red_queries", 0) + 1
            if r == z3.unsat:
                res["red_confirmed"] += len(group)
                return
            if len(group) > 1:
                half = len(group) // 2
                check_group(group[:half])
                check_group(group[half:])
                return
            if r == z3.sat:
                res["red_refuted"] += 1
                res.setdefault("refuted_indices", []).append(group[0])
            else:
                retry.append((group[0], len(kept)))
            s.add(asserts[group[0]])
            kept.append(group[0])

        run: list[int] = []
        for i, a in enumerate(asserts):
            if i in marked:
                run.append(i)
                if len(run) < 512:
                    continue
            if run:
                check_group(run)
                run = []
            if i not in marked:
                s.add(a)
                kept.append(i)
        if run:
            check_group(run)
        for i, n_kept in retry:
            if time.perf_counter() > deadline:
                res["red_unchecked"] = res.get("red_unchecked", 0) + 1
                continue
            s2 = z3.Solver()
            s2.set("timeout", retry_timeout_ms)
            s2.add([asserts[j] for j in kept[:n_kept]])
            s2.add(z3.Not(asserts[i]))
            r = s2.check()
            key = "red_confirmed" if r == z3.unsat else ("red_refuted" if r == z3.sat else "red_unknown")
            res[key] += 1
            if r == z3.sat:
                res.setdefault("refuted_indices", []).append(i)
            elif r != z3.unsat:
                res.setdefault("unknown_indices", []).append(i)
        res["red_retried"] = len(retry)
    return res


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus")
    ap.add_argument("--z3-timeout", type=int, default=120)
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "shapes_dev.json"))
    ap.add_argument("--all", action="store_true", help="every file, not only distinct contents")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--check-timeout-ms", type=int, default=2000)
    ap.add_argument("--recheck-budget-s", type=float, default=300.0,
                    help="python z3 re-check time per file; redundancies not reached count as unchecked")
    args = ap.parse_args(argv)

    exe = find_bin()
    files = corpus_files(Path(args.corpus))
    n_all = len(files)
    copies: dict[str, int] = {}  # distinct file name -> how many corpus files have its contents
    if not args.all:
        seen, distinct = {}, []
        for f in files:
            h = hashlib.md5(f.read_bytes()).hexdigest()
            if h not in seen:
                seen[h] = f.name
                distinct.append(f)
            copies[seen[h]] = copies.get(seen[h], 0) + 1
        files = distinct
    if args.limit:
        files = files[: args.limit]
    rows = []
    for i, f in enumerate(files):
        if i % 2 == 0:
            rep, vf_t, err = run_vf(exe, f, [])
            z3_verdict, z3_t = run_z3(f, args.z3_timeout)
        else:
            z3_verdict, z3_t = run_z3(f, args.z3_timeout)
            rep, vf_t, err = run_vf(exe, f, [])
        red, red_t, _ = run_vf(exe, f, ["--redundant"])
        row = {"file": f.name, "copies": copies.get(f.name, 1), "bytes": f.stat().st_size, "vf_verdict": rep["verdict"] if rep else "error",
               "vf_s": vf_t, "vf_decided_by": rep.get("decided_by") if rep else err,
               "z3_verdict": z3_verdict, "z3_s": z3_t, "vf_redundant_s": red_t,
               "asserts": rep["stats"]["asserts"] if rep else 0,
               "decided_without_solver": rep["stats"]["decided_without_solver"] if rep else 0,
               "redundant": red["redundancy"]["count"] if red else 0,
               "redundant_by_reasoning": red["redundancy"]["by_reasoning"] if red else 0}
        if not args.no_verify and rep:
            try:
                t_check = time.perf_counter()
                row.update(verify(f, rep, red, args.check_timeout_ms, budget_s=args.recheck_budget_s))
                row["recheck_s"] = time.perf_counter() - t_check
            except Exception as e:  # noqa: BLE001 - a verification failure is data, not a crash
                row["verify_error"] = str(e)[:200]
        rows.append(row)
        print(f"[{i + 1}/{len(files)}] {f.name}: verifuse {row['vf_verdict']} {vf_t:.3f}s | "
              f"z3 {z3_verdict} {z3_t:.3f}s | redundant {row['redundant']}", flush=True)

    def summary(key_v: str, key_t: str) -> dict:
        ts = [r[key_t] for r in rows]
        solved = sum(r[key_v] in ("sat", "unsat") for r in rows)
        verdicts: dict[str, int] = {}
        for r in rows:
            verdicts[r[key_v]] = verdicts.get(r[key_v], 0) + 1
        # Every corpus file (duplicates counted with the time of their distinct copy).
        all_ts = [r[key_t] for r in rows for _ in range(r["copies"])]
        return {"solved": solved, "verdicts": verdicts, "median_s": statistics.median(ts) if ts else 0,
                "p90_s": pct(ts, 0.9), "max_s": max(ts) if ts else 0, "total_s": sum(ts),
                "solved_all_files": sum(r["copies"] for r in rows if r[key_v] in ("sat", "unsat")),
                "total_s_all_files": sum(all_ts), "median_s_all_files": statistics.median(all_ts) if all_ts else 0,
                "p90_s_all_files": pct(all_ts, 0.9)}

    def versions() -> dict:
        out: dict = {}
        try:
            out["z3_cli"] = subprocess.run(["z3", "--version"], capture_output=True, text=True).stdout.strip()
        except OSError as e:
            out["z3_cli"] = f"unavailable: {e}"
        try:
            import z3
            out["z3_python"] = z3.get_version_string()
        except ImportError:
            out["z3_python"] = "unavailable"
        out["verifuse_shapes_bin"] = exe
        out["cpus"] = os.cpu_count()
        out["loadavg_at_end"] = os.getloadavg()
        return out

    out = {
        "corpus": str(args.corpus), "files_in_corpus": n_all, "files_run": len(rows),
        "files_represented": sum(r["copies"] for r in rows), "environment": versions(),
        "distinct_only": not args.all, "z3_timeout_s": args.z3_timeout,
        "verifuse": summary("vf_verdict", "vf_s"), "z3": summary("z3_verdict", "z3_s"),
        "verifuse_redundant_pass_total_s": sum(r["vf_redundant_s"] for r in rows),
        "asserts_total": sum(r["asserts"] for r in rows),
        "decided_without_solver_total": sum(r["decided_without_solver"] for r in rows),
        "redundant_total": sum(r["redundant"] for r in rows),
        "redundant_by_reasoning_total": sum(r["redundant_by_reasoning"] for r in rows),
        "models_checked_ok": sum(r.get("model_ok") is True for r in rows),
        "models_failed": sum(r.get("model_ok") is False for r in rows),
        "redundancy_confirmed": sum(r.get("red_confirmed", 0) for r in rows),
        "redundancy_unknown": sum(r.get("red_unknown", 0) for r in rows),
        "redundancy_refuted": sum(r.get("red_refuted", 0) for r in rows),
        "redundancy_retried_fresh_solver": sum(r.get("red_retried", 0) for r in rows),
        "redundancy_unchecked_budget": sum(r.get("red_unchecked", 0) for r in rows),
        "redundancy_unchecked_files": [f"{r['file']}: {r['red_unchecked']}" for r in rows if r.get("red_unchecked")],
        "recheck_total_s": sum(r.get("recheck_s", 0) for r in rows),
        "verify_errors": sum("verify_error" in r for r in rows),
        "over_10s": [r["file"] for r in rows if r["vf_s"] > 10],
        "verifuse_not_solved": [f"{r['file']}: {r['vf_verdict']} ({r['vf_decided_by']})" for r in rows
                                if r["vf_verdict"] not in ("sat", "unsat")],
        "z3_not_solved": [f"{r['file']}: {r['z3_verdict']} ({r['z3_s']:.1f} s)" for r in rows
                          if r["z3_verdict"] not in ("sat", "unsat")],
        "verdict_disagreements": [f"{r['file']}: verifuse {r['vf_verdict']}, z3 {r['z3_verdict']}" for r in rows
                                  if {r["vf_verdict"], r["z3_verdict"]} == {"sat", "unsat"}],
        "rows": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))
    md = Path(args.json).with_suffix(".md")
    v, z = out["verifuse"], out["z3"]
    md.write_text(
        f"# verifuse-shapes vs plain z3 ({out['files_run']} files, "
        f"{'distinct contents' if not args.all else 'all files'}; z3 -T:{args.z3_timeout})\n\n"
        "| tool | solved | median s | p90 s | max s | total s |\n|---|---|---|---|---|---|\n"
        f"| verifuse-shapes | {v['solved']} | {v['median_s']:.3f} | {v['p90_s']:.3f} | {v['max_s']:.3f} | {v['total_s']:.1f} |\n"
        f"| z3 | {z['solved']} | {z['median_s']:.3f} | {z['p90_s']:.3f} | {z['max_s']:.3f} | {z['total_s']:.1f} |\n\n"
        f"Times are wall seconds per file of the whole process (parse, analysis, JSON), one file at a time, "
        f"verifuse and z3 alternating which runs first; z3 files that time out count {args.z3_timeout} s.\n"
        f"Over all {out['files_represented']} corpus files (a duplicate counted with its distinct copy's time): "
        f"verifuse solved {v['solved_all_files']}, total {v['total_s_all_files']:.1f} s, median "
        f"{v['median_s_all_files']:.3f} s, p90 {v['p90_s_all_files']:.3f} s; z3 solved {z['solved_all_files']}, total "
        f"{z['total_s_all_files']:.1f} s, median {z['median_s_all_files']:.3f} s, p90 {z['p90_s_all_files']:.3f} s.\n\n"
        f"- verdicts: verifuse {v['verdicts']}; z3 {z['verdicts']}; sat/unsat disagreements: "
        f"{out['verdict_disagreements'] or 'none'}\n"
        f"- not solved by verifuse: {out['verifuse_not_solved'] or 'none'}\n"
        f"- not solved by z3: {out['z3_not_solved'] or 'none'}\n"
        f"- asserts: {out['asserts_total']}, decided without a solver call: {out['decided_without_solver_total']}\n"
        f"- redundant asserts (prefix mode): {out['redundant_total']} "
        f"({out['redundant_by_reasoning_total']} by reasoning); pass time {out['verifuse_redundant_pass_total_s']:.1f} s\n"
        f"- python z3 re-check: models ok {out['models_checked_ok']}, failed {out['models_failed']}; "
        f"redundancies confirmed {out['redundancy_confirmed']}, unknown {out['redundancy_unknown']}, "
        f"refuted {out['redundancy_refuted']}, not re-checked within the per-file budget "
        f"{out['redundancy_unchecked_budget']} {out['redundancy_unchecked_files'] or ''}; "
        f"{out['redundancy_retried_fresh_solver']} needed the fresh-solver retry; "
        f"verify errors {out['verify_errors']}; re-check time {out['recheck_total_s']:.0f} s\n"
        f"- files over 10 s (verifuse): {out['over_10s'] or 'none'}\n"
        f"- environment: {out['environment']}\n")
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
