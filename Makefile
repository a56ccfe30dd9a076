# tbdkit: `make bench MODEL=deepspeech2` and `make test` are the two commands that matter.
MODEL ?= deepspeech2
FRAMEWORK ?=
BATCH ?=
PRESET ?= auto
PRECISION ?= fp32
GRAPH ?= standard
LAUNCHER ?= auto
NODES ?= 1
GPUS_PER_NODE ?= 1
LINK_RATE ?=
RESULTS ?= results
DATA ?= synthetic
PYTHON ?= python3
REPEAT ?= 1
REPORT ?= report
MAX_WARMUP_S ?=
# workers of `make test`'s parallel pass per suite (see test-host below)
TEST_WORKERS ?= 2
TEST_WORKERS_host ?= 4

# Every value a user can set reaches the shell as one word: $(call quote,V) single-quotes it
# (each ' inside written '\''), so a path with spaces or ; stays one argument and runs nothing.
# Every user variable is taken with $(value ...) and none is exported (exporting expands it): a
# `$(...)` in a value (a model name, a precision, a folder's name) stays text, never a make function.
# Every default is set above: `unexport` defines a variable (empty), so a `?=` below it would never apply.
# A newline in a value cannot stand in a recipe's text (the shell gets half a command): it is written
# '"$$TBDKIT_NL"' and the environment's TBDKIT_NL holds it, so the kit gets the value whole and answers it.
define TBDKIT_NL


endef
export TBDKIT_NL
quote = '$(subst $(TBDKIT_NL),'"$$TBDKIT_NL"',$(subst ','\'',$(1)))'
USER_VARIABLES := MODEL FRAMEWORK BATCH PRESET PRECISION GRAPH LAUNCHER NODES GPUS_PER_NODE LINK_RATE RESULTS DATA WORKLOADS \
	PYTHON REPEAT REPORT MAX_WARMUP_S CPUS PIN ONE_PROCESS RETRY_DISTURBED INCLUDE_DISTURBED KICK_RESULTS DEVICE QUICK \
	ADOPT WHEELS BUDGET SETUP TEST_WORKERS TEST_WORKERS_host TEST_WORKERS_pytorch TEST_WORKERS_tensorflow TEST_WORKERS_mxnet
unexport $(USER_VARIABLES)

# WORKLOADS=dir[:dir...]: folders of your own models, added to the kit's (docs/your-own-model.md).
WORKLOADS_OPT = $(if $(value WORKLOADS),--workloads $(call quote,$(value WORKLOADS)))
# MAX_WARMUP_S=S: a fixed warm-up cap instead of the preset's (a capped warm-up's note says which cap gives the rule room).
WARMUP_OPT = $(if $(value MAX_WARMUP_S),--max-warmup-s $(call quote,$(value MAX_WARMUP_S)))

VENV := .venv
TBDKIT := $(VENV)/bin/tbdkit
# The kit's own environment (host side: CLI, index, reports); frameworks live in .venvs/<stack>.
KIT_STAMP := $(VENV)/.tbdkit-installed

.PHONY: lock setup bench sweep report bundle kick-the-tires images test test-host test-pytorch test-tensorflow test-mxnet test-compiled bench-overhead calibrate reference reference-suite reference-table clean

# The kit's environment is installed from its lock exactly (locks/kit-test-py311.txt, every file's hash
# checked), then the kit itself, editable and without dependencies. pip installs the lock's own uv (its
# hashes checked), and uv the rest: it unpacks and writes the bytecode on every core (pip's time on CI:
# docs/measured-here.md), looking where pip is configured to look (tbdkit/env/installer.py, which
# runs here on the standard library alone). The kit's own modules and the workloads are compiled too (an
# editable install compiles nothing): where PYTHONDONTWRITEBYTECODE is set, every process would compile them.
KIT_LOCK := locks/kit-test-py311.txt

$(KIT_STAMP): pyproject.toml $(KIT_LOCK)
	$(call quote,$(value PYTHON)) -m venv $(VENV)
	awk '/^uv==/ { on = 1 } on { print } on && !/\\$$/ { exit }' $(KIT_LOCK) > $(VENV)/uv-requirement.txt
	$(VENV)/bin/pip install --disable-pip-version-check -q --require-hashes --no-deps -r $(VENV)/uv-requirement.txt
	$(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python --compile-bytecode \
		$$($(VENV)/bin/python -m tbdkit.env.installer) --require-hashes --no-deps -r $(KIT_LOCK)
	$(VENV)/bin/pip install --disable-pip-version-check -q --no-deps -e .
	$(VENV)/bin/python -m compileall -q tbdkit workloads
	touch $@

# Every lock in locks/ again from pyproject.toml's ranges (uv pip compile --generate-hashes; docs/environments.md).
lock: $(KIT_STAMP)
	$(VENV)/bin/python -m tbdkit.env.lockgen

# ADOPT=/path/to/python: the stack over that interpreter's own framework build (WHEELS=dir: what the kit lacks, offline).
setup: $(KIT_STAMP)
	$(TBDKIT) setup $(call quote,$(or $(value FRAMEWORK),pytorch)) $(if $(value ADOPT),--adopt $(call quote,$(value ADOPT))) \
		$(if $(value WHEELS),--wheels $(call quote,$(value WHEELS)))

bench: $(KIT_STAMP)
	$(TBDKIT) bench --model $(call quote,$(value MODEL)) $(if $(value FRAMEWORK),--framework $(call quote,$(value FRAMEWORK))) \
		$(if $(value BATCH),--batch $(call quote,$(value BATCH))) --preset $(call quote,$(value PRESET)) \
		--precision $(call quote,$(value PRECISION)) --graph $(call quote,$(value GRAPH)) --launcher $(call quote,$(value LAUNCHER)) \
		--data $(call quote,$(value DATA)) \
		--results $(call quote,$(value RESULTS)) --setup --nodes $(call quote,$(value NODES)) \
		--gpus-per-node $(call quote,$(value GPUS_PER_NODE)) $(if $(value LINK_RATE),--link-rate $(call quote,$(value LINK_RATE))) \
		$(if $(value CPUS),--cpus $(call quote,$(value CPUS))) $(if $(value PIN),--pin) $(if $(value ONE_PROCESS),--one-process) $(WARMUP_OPT) $(WORKLOADS_OPT)

# A grid (BATCH may hold `max`: the largest batch that fits); run again to resume.
sweep: $(KIT_STAMP)
	$(TBDKIT) sweep $(call quote,$(value MODEL)) $(if $(value FRAMEWORK),--frameworks $(call quote,$(value FRAMEWORK))) \
		$(if $(value BATCH),--batch $(call quote,$(value BATCH))) --preset $(call quote,$(value PRESET)) \
		--precision $(call quote,$(value PRECISION)) --graph $(call quote,$(value GRAPH)) --repeat $(call quote,$(value REPEAT)) --launcher $(call quote,$(value LAUNCHER)) \
		--data $(call quote,$(value DATA)) --results $(call quote,$(value RESULTS)) --setup \
		$(if $(value CPUS),--cpus $(call quote,$(value CPUS))) $(if $(value PIN),--pin) \
		$(if $(value RETRY_DISTURBED),--retry-disturbed $(call quote,$(value RETRY_DISTURBED))) $(WARMUP_OPT) $(WORKLOADS_OPT)

# The paper's figures, tables and claim checks over everything in RESULTS; and the artifact for reviewers.
report: $(KIT_STAMP)
	$(TBDKIT) report $(call quote,$(value RESULTS)) --out $(call quote,$(value REPORT)) \
		$(if $(value INCLUDE_DISTURBED),--include-disturbed) $(WORKLOADS_OPT)

bundle: $(KIT_STAMP)
	$(TBDKIT) bundle $(call quote,$(value RESULTS)) -o artifact.tar.gz $(WORKLOADS_OPT)

# An artifact evaluator's first check (docs/artifact.md): every instrument once inside BUDGET seconds (default
# 420, which fits an H100), in a folder of its own; its logic is `tbdkit kick-the-tires` (tbdkit/bench/kick.py). On
# a GPU: doctor, calibrate, ResNet-50 and Deep Speech 2 in fp32/amp/tf32, one ncu pass; on a CPU every stack's smoke
# run; then the report and a bundle. It uses the stacks installed or adopted; SETUP=1 installs missing ones first (not
# counted), from a lock made for the kit's Python only. KICK_RESULTS=dir puts it elsewhere.
KICK_RESULTS := results-kick-the-tires
kick-the-tires: $(KIT_STAMP)
	$(TBDKIT) kick-the-tires --results $(call quote,$(value KICK_RESULTS)) $(if $(value BUDGET),--budget $(call quote,$(value BUDGET))) \
		$(if $(value DEVICE),--device $(call quote,$(value DEVICE))) $(if $(value FRAMEWORK),--framework $(call quote,$(value FRAMEWORK))) $(if $(value SETUP),--setup)

# The framework images for LAUNCHER=docker (docker/images.lock pins their NGC bases).
images: $(KIT_STAMP)
	$(TBDKIT) images build $(call quote,$(or $(value FRAMEWORK),pytorch))

# Host-side tests run in the kit's environment (the cross-framework ones need every stack);
# framework tests in that framework's stack.
FRAMEWORK_TESTS := pytorch tensorflow mxnet
# Each suite in turn, its time and how busy the CPUs were printed (Linux's /proc/stat: a suite far below 100%
# waits more than it computes), then the total; the first failing suite stops the run.
cpu_ticks = awk '/^cpu /{print $$2+$$3+$$4+$$7+$$8+$$9, $$5+$$6}' /proc/stat 2>/dev/null || echo 0 0
test:
	@start=$$(date +%s); \
	for s in host $(FRAMEWORK_TESTS); do \
		t0=$$(date +%s); set -- $$($(cpu_ticks)); b0=$$1; i0=$$2; \
		$(MAKE) --no-print-directory test-$$s || { echo "test-$$s FAILED after $$(( $$(date +%s) - t0 )) s"; exit 1; }; \
		set -- $$($(cpu_ticks)); \
		echo "test-$$s: $$(( $$(date +%s) - t0 )) s, CPUs busy $$(( 100 * ($$1 - b0) / ($$1 - b0 + $$2 - i0 + 1) ))%"; \
	done; \
	echo "make test: $$(( $$(date +%s) - start )) s in all"

# Tests not marked serial run on TEST_WORKERS workers (pytest-xdist; a worker takes a file at a time, or in
# a stack's suite one model's tests: much of a test is a fixed wall-clock window, a process start or a graph
# trace on one thread, which leaves a core idle), the longest first (tests/scheduling.py); then the serial
# ones (they time things, need the machine to themselves or expect undisturbed runs) alone, collecting only
# the files that hold them. A stack's workers run one framework thread each (ONE_THREAD): much of a stack
# test is single-threaded (TorchDynamo's and XLA's compilation, graph traces), and two workers of two
# threads each crowded two cores. The host suite's workers each run on one core (ONE_CORE; tests/conftest.py),
# so the runs they start size their thread pools to one core, and it runs four: much of its work waits on
# processes starting, images building and fixed windows. The compiled, bf16 and math-mode legs of the cells marked
# compiled_matrix stay out (each outcome of the kit's compile, bf16 and math-mode logic keeps one cell per stack:
# tests/model_checks.py OUTCOME_CELLS); `make test-compiled` runs them. The times behind these choices:
# docs/measured-here.md, "Stacks' suites and the Makefile".
# $(call two_passes,PYTEST COMMAND,FOLDER,DURATIONS,WORKERS[,PARALLEL ENV]): both passes run even when the
# first fails; a folder with no serial test skips the second; PARALLEL ENV prefixes the first pass alone, and
# only when it runs on several workers.
define two_passes
	@rc=0; \
	$(if $(filter-out 1,$(4)),$(5)) $(1) $(2) -m "not serial and not compiled_matrix" $(if $(filter-out 1,$(4)),-n $(call quote,$(4)) --dist loadfile --no-loadscope-reorder) \
		--durations=$(3) || rc=$$?; \
	alone=$$($(call quote,$(value PYTHON)) tests/scheduling.py $(2)); \
	if [ -n "$$alone" ]; then $(1) $$alone -m "serial and not compiled_matrix" --durations=$(3) || rc=$$?; \
	else echo "$(2): no test runs alone"; fi; \
	exit $$rc
endef
test-host: $(KIT_STAMP)
	$(TBDKIT) setup $(FRAMEWORK_TESTS)
	$(call two_passes,$(VENV)/bin/python -m pytest $(addprefix --ignore=tests/,$(FRAMEWORK_TESTS)),tests,15,$(or $(value TEST_WORKERS_host),$(value TEST_WORKERS)),$(ONE_CORE))

# one thread per worker of a stack's parallel pass: OpenMP's (PyTorch, MXNet) and TensorFlow's two pools
ONE_THREAD := OMP_NUM_THREADS=1 TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1
# one core per worker of the host suite's parallel pass (and of every process it starts)
ONE_CORE := TBDKIT_TEST_ONE_CORE_PER_WORKER=1
test-pytorch test-tensorflow test-mxnet: test-%: $(KIT_STAMP)
	$(TBDKIT) setup $*
	$(call two_passes,.venvs/$*/bin/python -m pytest,tests/$*,5,$(or $(value TEST_WORKERS_$*),$(value TEST_WORKERS)),$(ONE_THREAD))

# The parity and math-mode checks of every cell (tests/model_checks.py parity, stepped), each stack's in turn: its
# compiled step and its bf16 steps against standard fp32, and a step in each of its math modes. `make test` runs
# those of one cell per outcome and stack (OUTCOME_CELLS).
test-compiled: $(KIT_STAMP)
	@rc=0; for s in $(FRAMEWORK_TESTS); do \
		.venvs/$$s/bin/python -m pytest tests/$$s/test_every_model_$$s.py \
			-k "compiled_step or bf16 or math_mode" --durations=0 || rc=$$?; \
	done; exit $$rc

# Every instrument against a workload whose true value is known, on this machine (DEVICE=cuda:0 adds the GPU probes).
calibrate: $(KIT_STAMP)
	$(TBDKIT) calibrate --device $(call quote,$(or $(value DEVICE),cpu)) --results $(call quote,$(value RESULTS)) $(if $(value QUICK),--quick)

# Collectors' cost: throughput with every collector on / a bare loop, measured in one run.
bench-overhead: $(KIT_STAMP)
	$(TBDKIT) setup $(call quote,$(or $(value FRAMEWORK),pytorch))
	$(TBDKIT) overhead --model $(call quote,$(value MODEL)) $(if $(value FRAMEWORK),--framework $(call quote,$(value FRAMEWORK))) $(WORKLOADS_OPT)

clean:
	rm -rf $(VENV) .venvs

# Reference results with an Nsight Compute pass on one NVIDIA GPU (docs/gpus-and-images.md): deepspeech2 and resnet50, or MODEL=m.
# Runs under PYTHON itself (it must have PyTorch); refuses without a GPU.
reference:
	$(call quote,$(value PYTHON)) -m tbdkit.bench.reference $(foreach m,$(if $(filter command line,$(origin MODEL)),$(value MODEL),deepspeech2 resnet50),--model $(call quote,$(m)))

# The whole suite's reference results: every model's paper preset at two batch sizes (no ncu pass), then the README's table.
reference-suite:
	$(call quote,$(value PYTHON)) -m tbdkit.bench.reference --suite --no-ncu
	$(call quote,$(value PYTHON)) -m tbdkit.bench.reference --table --readme

# The committed reference results (workloads/*/reference/) as the README's Markdown table.
reference-table:
	$(call quote,$(value PYTHON)) -m tbdkit.bench.reference --table --readme
