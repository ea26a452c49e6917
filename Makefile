# verifuse: the two quickstart commands are `make demo` and `make test` (README.md).
# Both install everything first from the project's own files, so they work on a fresh machine.
PYTHON ?= python
BUILD_DIR ?= build/cmake
JOBS ?= 2

.PHONY: report-screenshots install deps demo test test-crash test-saved-models test-cpp test-python test-tiers test-sanitize test-serve serve-deps prove clean bench-deps bench bench-hf bench-timm bench-torchvision bench-own bench-smoke bench-bf16 bench-hf-bf16 bench-timm-bf16 bench-torchvision-bf16 bench-own-bf16 bench-int8 bench-hf-int8 bench-timm-int8 bench-torchvision-int8 bench-own-int8 bench-hf-dynamic bench-reports bench-llm-deps bench-generate bench-generate-weight-only

deps:
	@# GoogleTest from Debian (docs/dependencies.md); everything else from PyPI, pinned.
	@dpkg -s libgtest-dev >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgtest-dev; }
	$(PYTHON) -m pip install -q -r requirements.txt

install: deps
	VERIFUSE_JOBS=$(JOBS) VERIFUSE_BUILD_DIR=$(CURDIR)/$(BUILD_DIR) $(PYTHON) -m pip install -q --no-build-isolation .

demo: install
	$(PYTHON) -m verifuse demo

test-cpp:
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

test-python:
	$(PYTHON) -m pytest -q tests/python

# The ISA-sensitive tests again with the capability model capped below this machine's tier (avx2, and
# avx512 without VNNI/bf16 where the host has more), eager capped alike; lists every skip per tier
# with its reason (tests/run_tiers.py). TIERS=avx2,avx512_vnni picks others.
TIERS ?= auto
test-tiers:
	$(PYTHON) tests/run_tiers.py --tiers $(TIERS) --build-dir $(BUILD_DIR) --jobs $(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer build of the torch-free C++ tests (its own build
# dir; -O1 -g1 and only the test targets below keep it lean). The LibTorch targets (executor,
# bindings) are left out for CI time: their translation units compile the whole LibTorch header
# tree (minutes each under ASan on 2 cores) and LibTorch itself is an uninstrumented wheel. Linking
# LibTorch under ASan+UBSan is not the obstacle (a minimal ATen/dispatcher program runs clean);
# add verifuse_runtime_test to SANITIZE_TARGETS to try it.
SANITIZE_DIR ?= build/asan
SANITIZE_TARGETS ?= verifuse_support_test verifuse_record_store_crash verifuse_ir_test verifuse_passes_test verifuse_partition_test \
	verifuse_kernels_test verifuse_verifier_test verifuse_shapes_test verifuse_cpu_kernels_test
SANITIZE_ENV = ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizer/lsan.supp

test-sanitize: deps
	cmake -S . -B $(SANITIZE_DIR) $$(command -v ninja >/dev/null && [ ! -f $(SANITIZE_DIR)/CMakeCache.txt ] && echo -G Ninja) \
		-DPython_EXECUTABLE=$$(command -v $(PYTHON)) -DVERIFUSE_SANITIZE=ON \
		-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1"
	@targets=""; help=$$(cmake --build $(SANITIZE_DIR) --target help); \
	for t in $(SANITIZE_TARGETS); do echo "$$help" | grep -qw "$$t" && targets="$$targets $$t"; done; \
	echo "test-sanitize: building$$targets"; \
	$(SANITIZE_ENV) cmake --build $(SANITIZE_DIR) -j $(JOBS) --target $$targets
	$(SANITIZE_ENV) ctest --test-dir $(SANITIZE_DIR) --output-on-failure -j $(JOBS) -E '_NOT_BUILT$$'

test: install
	$(MAKE) --no-print-directory test-cpp
	$(MAKE) --no-print-directory test-python
	$(MAKE) --no-print-directory test-tiers
	$(MAKE) --no-print-directory test-sanitize

# The record store's crash-consistency harness for minutes (make test runs it for seconds):
# workers writing, flushing and reading one store, SIGKILLed at random points; 0 lost or torn
# records allowed (tests/cpp/support/record_store_crash.cpp). CRASH_SECONDS, CRASH_WORKERS.
CRASH_SECONDS ?= 300
CRASH_WORKERS ?= 6
test-crash: install
	cmake --build $(BUILD_DIR) --target verifuse_record_store_crash
	$(BUILD_DIR)/support/verifuse_record_store_crash --seconds $(CRASH_SECONDS) --workers $(CRASH_WORKERS) --seed $$(date +%s)

# Saved functions for every model of the bench suites at full size, with their int8 (PT2E) and
# bf16 variants: saved here, loaded in a fresh process, compared with eager (make test runs the
# small stand-ins and the structural cases). Needs `make bench-deps` for transformers/timm/torchvision.
test-saved-models: install
	VERIFUSE_SAVE_ALL_MODELS=1 PYTHONPATH=$(CURDIR)/bench$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m pytest -q tests/python/test_save_every_model.py

# ---- serving (issue 18; examples/ray_serve/README.md) --------------------------------------------
# Ray Serve with 2 replicas on a local Ray cluster (loopback), verifuse vs eager vs inductor under
# bounded load, one verifuse replica killed mid-load; and (issue 40) a verifuse replica killed inside
# its write of the shared plan cache, whose replacement must replay the other replica's plan.
# Minutes on 2 cores: not part of `make test`. Scale with SERVE_MODELS=resnet50,bert
# SERVE_BACKENDS=verifuse,eager,inductor SERVE_REQUESTS=2000 SERVE_CLIENTS=8, and the kill-in-flush
# test with SERVE_FLUSH_MODELS=resnet50 SERVE_FLUSH_REQUESTS=200 SERVE_FLUSH_CLIENTS=4 SERVE_FLUSH_PAUSE=5.
serve-deps:
	$(PYTHON) -m pip install -q -c examples/ray_serve/constraints-serve.txt -r examples/ray_serve/requirements-serve.txt

test-serve: install serve-deps
	PYTHONPATH=$(CURDIR)/bench$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m pytest -s -q tests/serve

prove: install
	$(PYTHON) -m verifuse prove

clean:
	rm -rf build *.egg-info

# ---- peer benchmark (issue 14; bench/README.md, docs/benchmarking.md) ---------------------------
# `make bench-deps` installs OpenVINO, zentorch, transformers, timm, matplotlib (pinned, torch held at
# 2.13.0) and torchvision into a private directory (not site-packages: it would break transformers).
# `make bench-hf` etc. run one suite at batch 1 and 8/32, threads 1 and 2, all backends, one process
# per configuration; rerunning the same target resumes (finished configurations are kept).
BENCH_PY = PYTHONPATH=$(CURDIR)/bench$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON)
BENCH_RESULTS ?= bench/results
BENCH_THREADS ?= 1,2
BENCH_ARGS ?=
# BENCH_DTYPE=bfloat16 (or `make bench-hf-bf16` etc.): models and inputs in bf16 (issue 19); the result
# files get a -bf16 suffix, so bf16 and float32 runs sit side by side and resume independently
# BENCH_DTYPE=int8 (or `make bench-int8` etc.): the PT2E-quantized model, the same graph for every backend
# (issue 17; docs/benchmarking.md "int8 models"); result files get an -int8 suffix
BENCH_DTYPE ?= float32
BENCH_TAG = $(if $(filter bfloat16,$(BENCH_DTYPE)),-bf16,)$(if $(filter int8,$(BENCH_DTYPE)),-int8,)
BENCH_DT = --dtype $(BENCH_DTYPE)

bench-deps:
	$(PYTHON) -m pip install -q -c bench/constraints-bench.txt -r bench/requirements-bench.txt
	$(PYTHON) -m pip install -q --no-deps -c bench/constraints-bench.txt -r bench/requirements-bench-nodeps.txt
	$(BENCH_PY) -m verifuse_bench.vendor install
	$(BENCH_PY) -m verifuse_bench.vendor check

bench-hf:
	$(BENCH_PY) -m verifuse_bench --suite hf --backends all --threads $(BENCH_THREADS) $(BENCH_DT) \
		--json $(BENCH_RESULTS)/peers-hf$(BENCH_TAG).json --resume --no-print $(BENCH_ARGS)

bench-timm:
	$(BENCH_PY) -m verifuse_bench --suite timm --backends all --threads $(BENCH_THREADS) $(BENCH_DT) \
		--json $(BENCH_RESULTS)/peers-timm$(BENCH_TAG).json --resume --no-print $(BENCH_ARGS)

bench-torchvision:
	$(BENCH_PY) -m verifuse_bench --suite torchvision --backends all --threads $(BENCH_THREADS) $(BENCH_DT) \
		--json $(BENCH_RESULTS)/peers-torchvision$(BENCH_TAG).json --resume --no-print $(BENCH_ARGS)

bench-own:
	$(BENCH_PY) -m verifuse_bench --suite own --backends all --batch 1,32 --threads $(BENCH_THREADS) $(BENCH_DT) \
		--json $(BENCH_RESULTS)/peers-own$(BENCH_TAG).json --resume --no-print $(BENCH_ARGS)

bench: bench-hf bench-torchvision bench-timm bench-own

# the same in bf16: bench/results/peers-<suite>-bf16.json
bench-hf-bf16 bench-timm-bf16 bench-torchvision-bf16 bench-own-bf16:
	$(MAKE) $(@:-bf16=) BENCH_DTYPE=bfloat16

bench-bf16: bench-hf-bf16 bench-torchvision-bf16 bench-timm-bf16 bench-own-bf16

# the same in int8 (PT2E X86InductorQuantizer graph): bench/results/peers-<suite>-int8.json. bench-int8 =
# the issue's set: own suite (ResNet-50, MobileNetV2, BERT-base encoder, ...) and the hf suite
bench-hf-int8 bench-timm-int8 bench-torchvision-int8 bench-own-int8:
	$(MAKE) $(@:-int8=) BENCH_DTYPE=int8

bench-int8: bench-own-int8 bench-hf-int8

# dynamic=True on the hf text transformers, batch 1..8 x sequence 16..128: graphs compiled and errors
# (about 4 minutes): bench/results/hf_dynamic.{json,md}
bench-hf-dynamic:
	$(BENCH_PY) bench/shapes/hf_dynamic.py --json $(BENCH_RESULTS)/hf_dynamic.json

# ---- generation benchmark (issue 42; bench/README.md "Generation benchmark", docs/benchmarking.md) ----
# llama-cpp-python builds its bundled llama.cpp from the sdist with CMake (about 6 minutes on 2 cores):
# -march=native, without the multimodal library the benchmark does not use. --no-cache-dir: a wheel
# built for this CPU must not be taken from pip's cache on another one.
LLM_CMAKE_ARGS ?= -DGGML_NATIVE=ON -DLLAVA_BUILD=OFF
bench-llm-deps:
	CMAKE_ARGS="$(LLM_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) \
		$(PYTHON) -m pip install -q --no-cache-dir -c bench/constraints-bench.txt -r bench/requirements-llm.txt

# HF generate() on eager/inductor/OpenVINO/zentorch/verifuse and llama.cpp on the same random weights,
# one process per backend and configuration: bench/results/generation.{json,md}. GEN_MODELS=small for
# minutes instead of hours; GEN_ARGS for anything else (--cache, --batch, --prompt, --dtype, ...).
GEN_MODELS ?= qwen2.5-0.5b,llama-3.2-1b
GEN_ARGS ?=
bench-generate:
	$(BENCH_PY) -m verifuse_bench.generation --models $(GEN_MODELS) --backends all --cache static,dynamic \
		--batch 1,4 --prompt 128,512 --new-tokens 64 --threads 1 \
		--dtype float32,bfloat16,int8-weight-only,int4-weight-only \
		--json $(BENCH_RESULTS)/generation.json $(GEN_ARGS)

# The weight-only rows alone (torchao int8 / int4 against llama.cpp Q8_0 / Q4_0; eager runs as the
# tokens' reference): bench/results/generation-weight-only.{json,md}, about 45 minutes for both models.
bench-generate-weight-only:
	$(BENCH_PY) -m verifuse_bench.generation --models $(GEN_MODELS) --backends verifuse,llamacpp --cache static \
		--batch 1 --prompt 128 --new-tokens 32 --threads 1 --dtype int8-weight-only,int4-weight-only \
		--llamacpp-quants q8_0,q4_0 --json $(BENCH_RESULTS)/generation-weight-only.json $(GEN_ARGS)

# the .md table and .png plot of every peer-benchmark JSON in bench/results, made again from the JSON
# (only the JSON is committed: bench/results/INDEX.md); BENCH_REPORTS=bench/results/x.json for one file
BENCH_REPORTS ?= $(BENCH_RESULTS)/*.json
bench-reports:
	$(BENCH_PY) -m verifuse_bench.render $(BENCH_REPORTS)

# a few minutes: one tiny model per suite, every backend, 3 iterations
bench-smoke:
	for s in own hf timm torchvision; do \
		$(BENCH_PY) -m verifuse_bench --suite $$s --tiny --backends all --iters 3 --warmup 1 $(BENCH_DT) \
			--json $(BENCH_RESULTS)/smoke-$$s$(BENCH_TAG).json --no-print $(BENCH_ARGS) || exit 1; \
	done

# explain's HTML for a 2-layer Llama, BERT-base and a Qwen2.5-0.5B-class model, photographed in
# headless Chromium (Debian's; installed here if missing) into docs/report-screenshots/.
report-screenshots: install
	@command -v chromium >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
	$(BENCH_PY) bench/report_screenshots.py --out docs/report-screenshots
