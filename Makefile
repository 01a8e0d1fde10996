# Build, install and test the book. Everything runs from a venv that `make venv` creates in .venv/.
#
#   make book                build the rendered book from the notebooks' stored outputs
#   make book EXECUTE=1      re-execute every notebook on this machine, then build
#   make serve               serve the built book on http://localhost:8000 (PORT=8000)
#   make test                CPU test suite: lint, pytest + nbval (notebooks re-run and compared), book build
#   make lint                ruff format --check and ruff check (line length 100, pyproject.toml)
#   make test-gpu            GPU-marked tests, and the notebooks re-run without output comparison
#   make test-portable       the notebooks compared again under a second CPU kernel path
#   make kernels             build Colossal-AI's GPU kernels once (clears a stale build lock first)
#   make system-packages     install the Debian packages the browser and multi-node tests use
#                            (chromium, openssh-server, slurm-wlm, munge), starting no service
#   make clean               remove .venv, _build and _offline
#
# Knobs (see README.md):
#   TORCH_SPEC=torch==2.13.0 default; `TORCH_SPEC=` installs no torch (use one already present)
#   SYSTEM_SITE=1            make the venv with --system-site-packages (a GPU box's CUDA torch)
#   PYTHON=python3           interpreter that creates the venv
#   BOOK_SKIP_BROWSER=1      skip the headless-Chromium check even where Chromium is installed
#   BOOK_REQUIRE_BROWSER=1   fail instead of skipping the Chromium check when Chromium is missing (CI)
#   BOOK_SYSTEM_PACKAGES=1   let make test install the Debian packages anywhere (0: never)
#   TEST_JOBS=2              pytest processes of make test (default 2; 1: no pytest-xdist)
#   NO_VENV=1                use the python3 already on PATH instead of .venv (e.g. a GPU box
#                            without a package index: source .gpu-kit/activate.sh; make test-gpu NO_VENV=1)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.ONESHELL:
.DEFAULT_GOAL := help

PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
SYSTEM_SITE ?=
EXECUTE ?=
BOOK_SKIP_BROWSER ?=
BOOK_REQUIRE_BROWSER ?=
PYTEST_ARGS ?=
NO_VENV ?=

VENV := .venv
STAMP := $(VENV)/.installed
ifeq ($(NO_VENV),1)
PY := python3
JUPYTER_BOOK := jupyter-book
PYTHON_ENV :=
else
PY := $(VENV)/bin/python
JUPYTER_BOOK := $(VENV)/bin/jupyter-book
PYTHON_ENV := $(STAMP)
endif

# Offline JavaScript for the ipywidgets HTML manager (ipywidgets 8.1.x needs html-manager ^1.0.1).
HTML_MANAGER_VERSION := 1.0.15
REQUIREJS_VERSION := 2.3.7
OFFLINE := _offline/widgets
# Pyodide (CPython in WebAssembly, npm package "pyodide") for the calculator page, which runs
# helpers.cost in the reader's browser: only its core files are kept, in _offline/pyodide/.
PYODIDE_VERSION := 314.0.8
PYODIDE_SHA256 := 9a52704e0ae5b07aaacb8e4fed9f1658e8024694a078695ea45ac79dee4cefcb
PYODIDE := _offline/pyodide
OFFLINE_STAMP := $(OFFLINE)/.html-manager-$(HTML_MANAGER_VERSION)-requirejs-$(REQUIREJS_VERSION)-pyodide-$(PYODIDE_VERSION)

# Environment for everything run from the venv: its kernel spec before any user-level one,
# no inherited Agg backend (it silently drops every plot), the venv's tools first on PATH.
RUN_ENV := env -u MPLBACKEND PATH="$(CURDIR)/$(VENV)/bin:$$PATH" JUPYTER_PREFER_ENV_PATH=1 \
	PYTHONHASHSEED=0 PYDEVD_DISABLE_FILE_VALIDATION=1

NBVAL_FLAGS := --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-current-env \
	--nbval-cell-timeout 600
# per-test limit (pytest-timeout, in requirements.txt), so a hung rank cannot eat the CI budget
TIMEOUT_FLAG := --timeout 900
# pytest processes (pytest-xdist): a test file or notebook stays in one process, with its fixtures
# and its kernel; the ranks' CPU work is the same, the time they spend waiting now overlaps. The
# notebooks, the longest pieces, are handed out first.
# TEST_JOBS=1 runs everything in one process.
TEST_JOBS ?= 2
JOBS_FLAG := $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile)

# Prints "==> step" and "    step: N.N s" around a command (bash function, used in recipes).
define TIMER
step() { local t0=$$(date +%s.%N); echo "==> $$1"; shift; "$$@"; \
  echo "    done in $$(awk -v a="$$t0" -v b="$$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"; }
endef

.PHONY: help venv book serve lint test test-gpu test-portable kernels system-packages system-packages-auto clean

help:
	@sed -n '2,24p' Makefile | sed 's/^# \{0,1\}//'

# ---------------------------------------------------------------------------------------------
# venv: Python packages, Colossal-AI (--no-deps), the helpers package, a kernel, offline JS
# ---------------------------------------------------------------------------------------------
venv: $(STAMP) $(OFFLINE_STAMP)

$(STAMP): requirements.txt requirements-colossalai.txt requirements-deepspeed.txt pyproject.toml
	@$(TIMER)
	t_all=$$(date +%s.%N)
	step "create $(VENV) with $(PYTHON) ($$($(PYTHON) --version 2>&1))$(if $(SYSTEM_SITE), using system site-packages)" \
	  $(PYTHON) -m venv $(if $(SYSTEM_SITE),--system-site-packages) $(VENV)
	step "pip install $(if $(TORCH_SPEC),$(TORCH_SPEC),(torch already present)) + requirements*.txt" \
	  $(PY) -m pip install --quiet $(if $(TORCH_SPEC),"$(TORCH_SPEC)") \
	    -r requirements.txt -r requirements-colossalai.txt
	# colossalai 0.5.0 pins torch<=2.5.1 and transformers==4.51.3: install it without its
	# dependency list (the ones it imports are in requirements-colossalai.txt). See README.md.
	step "pip install --no-deps colossalai==0.5.0" \
	  $(PY) -m pip install --quiet --no-deps colossalai==0.5.0
	# DeepSpeed beside site-packages, not in it: transformers 4.51.3 imports DeepSpeed in every
	# process that loads its models once it can find it (+0.4 s per rank, a line on stdout), so only
	# Chapter 6's DeepSpeed ranks put .venv/deepspeed on sys.path (helpers/train/deepspeed_run.py).
	# A source release: it builds into a pure-Python wheel, no op compiled (no --no-build-isolation).
	step "pip install --no-deps --target $(VENV)/deepspeed deepspeed (requirements-deepspeed.txt)" \
	  $(PY) -m pip install --quiet --no-deps --upgrade --target $(VENV)/deepspeed \
	    -r requirements-deepspeed.txt
	step "pip install --no-deps -e . (helpers package)" \
	  $(PY) -m pip install --quiet --no-deps -e .
	step "install Jupyter kernel 'python3' into $(VENV)" \
	  $(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (book venv)"
	$(PY) -c 'import torch, colossalai, sys; print("    python", sys.version.split()[0], "| torch", torch.__version__, "| colossalai", colossalai.__version__, "| CUDA GPUs", torch.cuda.device_count() if torch.cuda.is_available() else 0)'
	touch $@
	echo "==> venv ready in $$(awk -v a="$$t_all" -v b="$$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"

# npm pack fetches one tarball per package (no dependency tree); only the files pages load are
# extracted (never package.json/README.md: Sphinx would take README.md for a page).
$(OFFLINE_STAMP):
	@$(TIMER)
	if ! command -v npm >/dev/null 2>&1; then
	  echo "ERROR: npm is needed once to fetch the offline ipywidgets/RequireJS JavaScript and Pyodide" >&2
	  echo "       (npm pack @jupyter-widgets/html-manager@$(HTML_MANAGER_VERSION) requirejs@$(REQUIREJS_VERSION) pyodide@$(PYODIDE_VERSION))." >&2
	  echo "       Install Node.js/npm (Debian: apt-get install npm) and run make again." >&2
	  exit 1
	fi
	fetch() {
	  local tmp; tmp=$$(mktemp -d)
	  if ! (cd "$$tmp" && npm pack --silent @jupyter-widgets/html-manager@$(HTML_MANAGER_VERSION) \
	     requirejs@$(REQUIREJS_VERSION) pyodide@$(PYODIDE_VERSION) >/dev/null); then
	    echo "ERROR: npm pack could not fetch the packages from the npm registry" >&2
	    echo "       ($$(npm config get registry)): offline? Run make again once it is reachable." >&2
	    exit 1
	  fi
	  (cd "$$tmp" && echo "$(PYODIDE_SHA256)  pyodide-$(PYODIDE_VERSION).tgz" | sha256sum -c --quiet) || {
	    echo "ERROR: pyodide-$(PYODIDE_VERSION).tgz does not match PYODIDE_SHA256 in the Makefile" >&2; exit 1; }
	  rm -rf $(OFFLINE) $(PYODIDE) && mkdir -p $(OFFLINE) $(PYODIDE)
	  tar xzf "$$tmp"/jupyter-widgets-html-manager-$(HTML_MANAGER_VERSION).tgz -C $(OFFLINE) \
	    --strip-components=2 --wildcards 'package/dist/embed-amd.js' 'package/dist/*.woff2'
	  tar xzf "$$tmp"/requirejs-$(REQUIREJS_VERSION).tgz -C $(OFFLINE) --strip-components=1 \
	    package/require.js
	  tar xzf "$$tmp"/pyodide-$(PYODIDE_VERSION).tgz -C $(PYODIDE) --strip-components=1 \
	    package/pyodide.mjs package/pyodide.asm.mjs package/pyodide.asm.wasm \
	    package/python_stdlib.zip package/pyodide-lock.json
	  rm -rf "$$tmp"
	}
	step "fetch offline JS (html-manager $(HTML_MANAGER_VERSION), requirejs $(REQUIREJS_VERSION), pyodide $(PYODIDE_VERSION)) into _offline" fetch
	test -s $(OFFLINE)/embed-amd.js && test -s $(OFFLINE)/require.js && test -s $(PYODIDE)/pyodide.asm.wasm
	echo "    $$(du -sh $(OFFLINE) | cut -f1) in $(OFFLINE): $$(cd $(OFFLINE) && ls | tr '\n' ' ')"
	echo "    $$(du -sh $(PYODIDE) | cut -f1) in $(PYODIDE): $$(cd $(PYODIDE) && ls | tr '\n' ' ')"
	touch $@

# ---------------------------------------------------------------------------------------------
# book
# ---------------------------------------------------------------------------------------------
# EXECUTE=1: a copy of _config.yml with execute_notebooks: force, written to _build/.
book: $(PYTHON_ENV) $(OFFLINE_STAMP)
	@t0=$$(date +%s.%N)
	config_arg=()
	if [ -n "$(EXECUTE)" ]; then
	  mkdir -p _build
	  $(PY) -c 'import yaml; c = yaml.safe_load(open("_config.yml")); c["execute"]["execute_notebooks"] = "force"; open("_build/config-execute.yml", "w").write("# written by make book EXECUTE=1 from _config.yml\n" + yaml.safe_dump(c, sort_keys=False))'
	  config_arg=(--config _build/config-execute.yml)
	  echo "==> EXECUTE=1: every notebook is re-executed on this machine"
	fi
	$(RUN_ENV) $(JUPYTER_BOOK) build . -W -n --keep-going "$${config_arg[@]}"
	echo "==> book built in $$(awk -v a="$$t0" -v b="$$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s; read it with"
	echo "    make serve   (then http://localhost:$(PORT)/; file://$(CURDIR)/_build/html/index.html works too, but for the calculator)"

# The built book over HTTP on this machine only: the calculator page loads WebAssembly and
# Python files with fetch(), which browsers refuse to pages opened from file://.
PORT ?= 8000
serve:
	@test -f _build/html/index.html || { echo "ERROR: no built book in _build/html: run make book first" >&2; exit 1; }
	echo "==> serving _build/html on http://localhost:$(PORT)/ (calculator: http://localhost:$(PORT)/book/calculator.html); Ctrl-C stops it"
	$(PYTHON) -m http.server --bind 127.0.0.1 --directory _build/html $(PORT)

# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------
# Debian packages the tests use: chromium for the rendered-page check (tests/test_book_build.py),
# and for Chapter 5's multi-node runs on one machine openssh-server (colossalai run --hostfile over
# ssh), slurm-wlm and munge (a two-node SLURM cluster). `make test` installs the missing ones only
# where that changes nothing a reader owns: as root with no systemd running (a container, CI).
# On a personal machine it installs nothing; those tests skip and say so. `make system-packages`
# (or BOOK_SYSTEM_PACKAGES=1) installs them anywhere, starting and enabling no service
# (helpers/run/system_packages.py); BOOK_SYSTEM_PACKAGES=0 never installs.
BOOK_SYSTEM_PACKAGES ?=
SYSTEM_MODE := $(if $(filter 1,$(BOOK_SYSTEM_PACKAGES)),install,$(if $(filter 0,$(BOOK_SYSTEM_PACKAGES)),status,auto))
system-packages-auto: $(PYTHON_ENV)
	@$(PY) -m helpers.run.system_packages $(SYSTEM_MODE)

system-packages: $(PYTHON_ENV)
	@$(PY) -m helpers.run.system_packages install

# The code and the notebooks' code cells, held to one format and 100 columns (pyproject.toml);
# a difference fails with the diff. Fix with: .venv/bin/ruff format . && .venv/bin/ruff check --fix .
RUFF := $(if $(filter 1,$(NO_VENV)),ruff,$(VENV)/bin/ruff)
lint: $(PYTHON_ENV)
	@echo "==> ruff format --check, ruff check ($$($(RUFF) --version))"
	$(RUFF) format --check --diff helpers tests notebooks
	$(RUFF) check helpers tests notebooks

test: $(PYTHON_ENV) $(OFFLINE_STAMP) system-packages-auto lint
	@t0=$$(date +%s.%N)
	rc=0
	shared=$$(mktemp -d -t book-shared-runs-XXXXXX)  # one run of each demo per test run
	$(RUN_ENV) BOOK_SHARED_RUNS="$$shared" BOOK_SKIP_BROWSER="$(BOOK_SKIP_BROWSER)" BOOK_REQUIRE_BROWSER="$(BOOK_REQUIRE_BROWSER)" $(PY) -m pytest notebooks tests \
	  --nbval $(NBVAL_FLAGS) $(TIMEOUT_FLAG) -m "not gpu" --durations=15 -q $(JOBS_FLAG) $(PYTEST_ARGS) || rc=$$?
	echo "==> $$($(PY) -m helpers.run.shared "$$shared")"
	rm -rf "$$shared"
	echo "==> make test: pytest wall time $$(awk -v a="$$t0" -v b="$$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s (exit code $$rc)"
	exit $$rc

# Colossal-AI's JIT kernels (HybridAdam's cpu_adam and fused_optim_cuda), built once per machine
# into ~/.cache/colossalai/torch_extensions with a progress line (about a minute on an H200); a
# build lock no live process holds is removed first (helpers/run/kernels.py). Without CUDA: one line.
kernels: $(PYTHON_ENV)
	@$(RUN_ENV) $(PY) -m helpers.run.kernels

# On a GPU box: the GPU-marked tests, then every notebook re-executed (outputs differ from the
# stored CPU ones, so only cells marked # NBVAL_CHECK_OUTPUT are compared). helpers.record.gpu_suite runs
# both and writes results/<hardware>/test_gpu.json (each test and notebook: outcome, seconds).
test-gpu: $(PYTHON_ENV) kernels
	@t0=$$(date +%s.%N)
	rc=0
	timeout_flag=""; if $(PY) -c 'import pytest_timeout' 2>/dev/null; then timeout_flag="$(TIMEOUT_FLAG)"; fi
	$(RUN_ENV) $(PY) -m helpers.record.gpu_suite --record $$timeout_flag $(PYTEST_ARGS) || rc=$$?
	echo "==> make test-gpu: wall time $$(awk -v a="$$t0" -v b="$$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s (exit code $$rc)"
	exit $$rc

# The nbval part of `make test` once more under a second CPU kernel path (torch's vector kernels
# are chosen per CPU: stored outputs must hold on AVX2 and AVX-512 machines alike).
# The BLAS (MKL) and oneDNN choose their own code paths: capped at the same level.
PORTABLE_CAPABILITY ?= default
ISA_CAPS := default:SSE41:SSE4_2 avx2:AVX2:AVX2 avx512:AVX512_CORE:AVX512
ISA_CAP = $(word $(1),$(subst :, ,$(filter $(PORTABLE_CAPABILITY):%,$(ISA_CAPS))))
test-portable: $(PYTHON_ENV) $(OFFLINE_STAMP)
	@t0=$$(date +%s.%N)
	rc=0
	if [ -z "$(call ISA_CAP,1)" ]; then echo "PORTABLE_CAPABILITY must be default, avx2 or avx512" >&2; exit 2; fi
	echo "==> notebooks under ATEN_CPU_CAPABILITY=$(PORTABLE_CAPABILITY), ONEDNN_MAX_CPU_ISA=$(call ISA_CAP,2), MKL_ENABLE_INSTRUCTIONS=$(call ISA_CAP,3) (this CPU: $$($(PY) -c 'import torch; print(torch.backends.cpu.get_cpu_capability())'))"
	$(RUN_ENV) ATEN_CPU_CAPABILITY=$(PORTABLE_CAPABILITY) ONEDNN_MAX_CPU_ISA=$(call ISA_CAP,2) \
	  MKL_ENABLE_INSTRUCTIONS=$(call ISA_CAP,3) $(PY) -m pytest notebooks \
	  --nbval $(NBVAL_FLAGS) $(TIMEOUT_FLAG) -q $(JOBS_FLAG) $(PYTEST_ARGS) || rc=$$?
	echo "==> make test-portable: wall time $$(awk -v a="$$t0" -v b="$$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s (exit code $$rc)"
	exit $$rc

clean:
	rm -rf $(VENV) _build _offline *.egg-info .pytest_cache
	find . -name __pycache__ -type d -not -path './.git/*' -prune -exec rm -rf {} +
	find . -name .ipynb_checkpoints -type d -not -path './.git/*' -prune -exec rm -rf {} +
