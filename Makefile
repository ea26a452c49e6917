# verifuse: the two quickstart commands are `make demo` and `make test` (README.md).
# Both install everything first from the project's own files, so they work on a fresh machine.
PYTHON ?= python
BUILD_DIR ?= build/cmake
JOBS ?= 2

.PHONY: install deps demo test test-cpp test-python prove clean

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

test: install
	$(MAKE) --no-print-directory test-cpp
	$(MAKE) --no-print-directory test-python

prove: install
	$(PYTHON) -m verifuse prove

clean:
	rm -rf build *.egg-info
