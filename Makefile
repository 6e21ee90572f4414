# On a fresh machine: `make demo`, `make test` (every change: 4.5 to 5 minutes on 2 cores after `make install`) and
# `make test-all` (before anything lands, what CI runs: the slow tests too). Everything they need is installed here:
# `make test` installs only into the project's folder (.venv); `make test-all` also installs what its slow tests use
# outside Python (`make test-deps`: Chromium from apt as root, the Azure emulator with npm), and says so first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# nbdev 2's docs commands shell out to whatever `pip` comes first: keep the venv first on PATH.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# Python's bytecode caches on, whatever the shell says: without them every test process compiles the test modules
# again and rewrites their asserts (pytest keeps its rewrites beside the bytecode), seconds in each of them
unexport PYTHONDONTWRITEBYTECODE

.PHONY: jpeg-headers browser azurite s3rver test-deps install demo test test-all test-start sync-check readme-check nbtest nbtest-all pytest pytest-all coverage docs docs-check bench clean format

# stock Debian/Ubuntu Pythons need python3-venv for `-m venv` (ensurepip)
$(VENV)/bin/python:
	@if ! python3 -c 'import ensurepip' 2>/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; fi
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# libjpeg-turbo's header for the crop-aware JPEG decoder (csrc/native.c); the build goes on without it.
# libjpeg-dev is libjpeg-turbo's development package on both Debian and Ubuntu.
jpeg-headers:
	@if [ ! -f /usr/include/jpeglib.h ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjpeg-dev >/dev/null || \
	  echo "could not install libjpeg-dev: timmdata will decode whole JPEGs (slower)"; fi

# headless Chromium for the docs browser test (tests/test_docs_browser.py)
browser:
	@if ! command -v chromium >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || \
	  echo "could not install chromium: the browser test will say how"; fi

# Azurite, Microsoft's Azure Storage emulator (Node.js), for the az:// tests (tests/test_object_store_azure.py): npm
# installs it into .venv/azurite where node and npm are; without them those tests are skipped and say why
AZURITE_VERSION := 3.35.0
azurite:
	@if [ ! -x $(VENV)/azurite/node_modules/.bin/azurite-blob ] && command -v npm >/dev/null; then \
	  mkdir -p $(VENV)/azurite && npm install -s --no-audit --no-fund --prefix $(VENV)/azurite azurite@$(AZURITE_VERSION) >/dev/null 2>&1 || \
	  echo "could not install Azurite with npm: the az:// tests will be skipped"; fi

# s3rver, an S3 server for Node.js, for bench/bench_object_store_cores.py (the S3 server on a core of its own): npm
# installs it into .venv/s3rver; not needed by make test
S3RVER_VERSION := 3.7.1
s3rver:
	@command -v npm >/dev/null || { echo "s3rver needs Node.js and npm: apt-get install -y nodejs npm"; exit 2; }
	@[ -d $(VENV)/s3rver/node_modules/s3rver ] || { mkdir -p $(VENV)/s3rver && \
	  npm install -s --no-audit --no-fund --prefix $(VENV)/s3rver s3rver@$(S3RVER_VERSION) >/dev/null; }

# the demo's torch: on Linux without an NVIDIA GPU (no nvidia-smi that lists one, none under /proc/driver/nvidia/gpus)
# torch and torchvision come from PyTorch's CPU index first, where it answers: pip's default torch brings about 3 GB of
# CUDA libraries. Not when the venv has a torch already, and not for `make install` (tools/demo_torch.sh). NVIDIA_SMI
# and NVIDIA_PROC say where to look for a GPU (tests/test_packaging.py points them at fakes); DEMO_TORCH=default skips it
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
NVIDIA_SMI ?= nvidia-smi
NVIDIA_PROC ?= /proc/driver/nvidia
DEMO_TORCH ?= $(shell bash tools/demo_torch.sh choose '$(NVIDIA_SMI)' '$(NVIDIA_PROC)')

# the demo's install: the library and what it requires (torch, torchvision, Pillow, numpy, matplotlib), no development extras
$(VENV)/.installed-lib: $(VENV)/bin/python setup.py settings.ini csrc/native.c
	$(MAKE) --no-print-directory jpeg-headers
	$(if $(filter cpu,$(DEMO_TORCH)),bash tools/demo_torch.sh install $(PY) $(TORCH_CPU_INDEX))
	$(PY) -m pip install -q -e .
	touch $@

# the development install (`make test`, docs, wheels): the library and every extra (nbdev, timm, Lightning, datasets, ...)
$(VENV)/.installed: $(VENV)/bin/python setup.py settings.ini csrc/native.c
	$(MAKE) --no-print-directory jpeg-headers
	$(PY) -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed-lib

# the development install and the bytecode of the library and the tests: a first `make test` after it does no installing,
# so it takes what later ones take. Nothing outside the project's folder (the system's packages, npm's) is installed here
install: $(VENV)/.installed
	@$(PY) -m compileall -q -j 0 timmdata tests tools >/dev/null

# what the slow tests use outside Python: `make test-all` runs it first; `make test` skips the tests that need them and
# says so at its end
test-deps:
	@echo "== test-deps: the slow tests' programs outside Python: headless Chromium (apt-get, as root: about 350 MB) for the site's browser tests, Azurite (npm, into $(VENV)/azurite: about 190 MB) for the az:// tests"
	@$(MAKE) --no-print-directory browser azurite

demo: $(VENV)/.installed-lib
	$(VENV)/bin/timmdata demo

# the library is generated from the notebooks: fail when nbdev_export or nbdev_clean would change a file
sync-check: install
	@echo "== sync-check: do the notebooks and timmdata/ agree? (seconds)"
	bash tools/check_sync.sh

# the notebooks' code cells as ruff format writes them (ruff.toml), then nbdev_clean && nbdev_export
format: install
	bash tools/format_nbs.sh

readme-check: install
	@echo "== readme-check: is README.md made from nbs/index.ipynb? (seconds)"
	$(PY) tools/make_readme.py --check

# The sample-data generator keeps the images it draws here and copies them after (TIMMDATA_SAMPLE_CACHE): the tests
# draw the same few thousand images over and over. A folder per version of the drawing code; `make clean` removes it
SAMPLE_CACHE := $(CURDIR)/$(VENV)/sample-cache
nbtest nbtest-all pytest pytest-all coverage: export TIMMDATA_SAMPLE_CACHE = $(SAMPLE_CACHE)

# pytest's extra arguments, e.g. a random order: make test PYTEST_ARGS='--random-order-bucket=global'
PYTEST_ARGS ?=
# notebooks and test files make test runs at once: one more than the cores (3 on 2 cores), as a test or a notebook often
# waits (for a subprocess, a server, a worker's start) and the third keeps both cores busy (1.9 of 2 against 1.7 with
# two). make test-all runs as many as the cores (ALL_JOBS): its slow tests start servers, processes and stress loads
TEST_JOBS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
ALL_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PYTEST_FLAGS := -q --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

# nbdev_test's run with a line per notebook as it finishes (nbdev_test itself prints nothing until the end)
nbtest: install
	@echo "== nbtest: every notebook's tests, $(TEST_JOBS) at a time, cells flagged slow skipped (the longest step)"
	bash tools/scratch_tmp.sh $(PY) tools/nbtest.py --n_workers $(TEST_JOBS)

nbtest-all: install test-deps
	@echo "== nbtest-all: every notebook's tests, $(ALL_JOBS) at a time, the cells flagged slow too"
	bash tools/scratch_tmp.sh $(PY) tools/nbtest.py --n_workers $(ALL_JOBS) --flags slow

pytest: install
	@echo "== pytest: tests/ without the slow ones (multi-process, parity with timm, stress), $(TEST_JOBS) files at a time (pytest-xdist), the longest first: a dot per test"
	bash tools/scratch_tmp.sh $(PY) -m pytest -n $(TEST_JOBS) $(PYTEST_FLAGS) tests

pytest-all: install test-deps
	@echo "== pytest-all: tests/, the slow ones too (browser, timm's scripts, frameworks, stress), $(ALL_JOBS) files at a time"
	TIMMDATA_SLOW=1 bash tools/scratch_tmp.sh $(PY) -m pytest -n $(ALL_JOBS) $(PYTEST_FLAGS) tests

# line coverage of timmdata/ over every test in tests/ (the slow ones too), worker processes and subprocesses included
coverage: install test-deps
	TIMMDATA_SLOW=1 bash tools/scratch_tmp.sh $(PY) -m pytest -n $(ALL_JOBS) $(PYTEST_FLAGS) --cov --cov-config=tools/coveragerc --cov-report=term:skip-covered tests

docs-check: install
	bash tools/build_docs.sh "$$(mktemp -d)/site"

# the contributor's loop, for every change: every notebook (cells flagged slow skipped) and the tests not marked slow
test: test-start sync-check readme-check nbtest pytest
	@echo "make test: all passed"

test-start:
	@echo "make test: sync-check, readme-check, nbtest, pytest; 4.5 to 5 minutes on a 2-core machine after the install (the contributing page: Three commands); make test-all before a change lands"

# everything, before anything lands (what CI runs): the slow notebook cells and tests too, the browser test among them
test-all: test-deps sync-check readme-check nbtest-all pytest-all
	@echo "make test-all: all passed"

readme: install
	$(PY) tools/make_readme.py

docs: install
	bash tools/build_docs.sh docs

bench: install
	$(VENV)/bin/timmdata bench

# a binary wheel that brings the fast path: the C extension and the libjpeg-turbo it was built against, copied into the
# wheel by auditwheel (timmdata.libs/, renamed so no other libjpeg can stand in); tagged manylinux for this machine's
# glibc symbols (build inside a manylinux image, e.g. with cibuildwheel, for the oldest glibc). `pip install wheelhouse/*.whl`
.PHONY: wheel wheel-check
wheel: install
	rm -rf build dist wheelhouse
	$(PY) -m build --wheel --outdir dist .
	$(PY) -m auditwheel repair dist/timmdata-*.whl -w wheelhouse

# the wheel's extension loads only its own libjpeg (system one hidden where root can), and `timmdata info` says active
wheel-check: wheel
	PY=$(PY) bash tools/wheel_check.sh

# issue 45's kit for a GPU machine without a package registry (Python 3.12): .whl/, carried by the device tool; there,
# bash tools/gpu_run.sh tests|bench|train (the contributing page: On a GPU machine)
.PHONY: gpu-kit
gpu-kit: install
	bash tools/gpu_kit.sh

# free-threaded CPython (issue 58): Debian's source package built with --disable-gil into .ft/python, and a venv .ft/venv
# with the free-threaded wheels and timmdata (its extension built for it); not part of `make test`. Times in .ft/times.txt
# (tools/ft_python.sh; FT_PY=3.13 asks for 3.13t only). `make ft-test`: tests/ and the notebooks on it.
.PHONY: ft-python ft-test
ft-python:
	bash tools/ft_python.sh all

ft-test: ft-python
	bash tools/ft_python.sh test

clean:
	rm -rf _proc _docs .pytest_cache $(SAMPLE_CACHE)
