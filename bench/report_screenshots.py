"""Explain reports of three transformer-scale models, saved as HTML and photographed in headless
Chromium (issue 44's acceptance): a 2-layer Llama-class model, BERT-base and a Qwen2.5-0.5B-class
model, all from transformers' configs with random weights.

    python bench/report_screenshots.py [--out docs/report-screenshots] [--only bert]

Needs transformers (make bench-deps) and Debian's chromium (apt-get install chromium); prints each
page's size, how many nodes were drawn of how many, and the largest SVG.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import time
from pathlib import Path

import torch


def models():
    import transformers as tf

    yield "llama-2layer", lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
        hidden_size=512, intermediate_size=1376, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
        vocab_size=32000)).eval(), (torch.randint(0, 32000, (1, 32)),)
    yield "bert-base", lambda: tf.BertModel(tf.BertConfig()).eval(), (torch.randint(0, 30000, (1, 128)),)
    yield "qwen2.5-0.5b-class", lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768)).eval(), \
        (torch.randint(0, 151936, (1, 32)),)


def main() -> None:
    import verifuse

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/report-screenshots")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    torch.manual_seed(0)
    for name, build, inputs in models():
        if args.only and args.only not in name:
            continue
        torch._dynamo.reset()
        model = build()
        t = time.perf_counter()
        report = verifuse.explain(model, *inputs)
        seconds = time.perf_counter() - t
        page = out / f"{name}.html"
        report.save_html(page)
        html = page.read_text()
        svgs = [len(s) for s in re.findall(r"<svg.*?</svg>", html, re.S)]
        drawn = re.search(r"Drawn: [^<]*", html)
        red = html.count('class="edge reorder"')
        print(f"{name}: explain {seconds:.1f} s, page {len(html) // 1024} KiB, first picture "
              f"{svgs[0] // 1024 if svgs else 0} KiB, {drawn.group(0) if drawn else 'drawn whole'}; "
              f"{red} red edge(s)", flush=True)
        if chromium:
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--screenshot={out / (name + '.png')}", "--window-size=1400,2200",
                            page.resolve().as_uri()], check=False, capture_output=True, timeout=120)
        del model, report


if __name__ == "__main__":
    main()
