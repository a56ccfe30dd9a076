# tbdkit: `make bench MODEL=deepspeech2` and `make test` are the two commands that matter.
MODEL ?= deepspeech2
FRAMEWORK ?=
BATCH ?=
PRESET ?= auto
PRECISION ?= fp32
LAUNCHER ?= native
RESULTS ?= results
DATA ?= synthetic
PYTHON ?= python3

VENV := .venv
TBDKIT := $(VENV)/bin/tbdkit
# The kit's own environment (host side: CLI, index, reports); frameworks live in .venvs/<stack>.
KIT_STAMP := $(VENV)/.tbdkit-installed

.PHONY: setup bench images test test-host test-pytorch test-tensorflow test-mxnet bench-overhead clean

$(KIT_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --disable-pip-version-check -q -e '.[test]'
	touch $@

setup: $(KIT_STAMP)
	$(TBDKIT) setup $(or $(FRAMEWORK),pytorch)

bench: $(KIT_STAMP)
	$(TBDKIT) bench --model $(MODEL) $(if $(FRAMEWORK),--framework $(FRAMEWORK)) $(if $(BATCH),--batch $(BATCH)) \
		--preset $(PRESET) --precision $(PRECISION) --launcher $(LAUNCHER) --data $(DATA) --results $(RESULTS) --setup

# The framework images for LAUNCHER=docker (docker/images.lock pins their NGC bases).
images: $(KIT_STAMP)
	$(TBDKIT) images build $(or $(FRAMEWORK),pytorch)

# Host-side tests run in the kit's environment (the cross-framework ones need every stack);
# framework tests in that framework's stack.
FRAMEWORK_TESTS := pytorch tensorflow mxnet
test: test-host $(addprefix test-,$(FRAMEWORK_TESTS))

test-host: $(KIT_STAMP)
	$(TBDKIT) setup $(FRAMEWORK_TESTS)
	$(VENV)/bin/python -m pytest tests $(addprefix --ignore=tests/,$(FRAMEWORK_TESTS))

test-pytorch test-tensorflow test-mxnet: test-%: $(KIT_STAMP)
	$(TBDKIT) setup $*
	.venvs/$*/bin/python -m pytest tests/$*

# Collectors' cost: throughput with every collector on / a bare loop, measured in one run.
bench-overhead: $(KIT_STAMP)
	$(TBDKIT) setup $(or $(FRAMEWORK),pytorch)
	$(TBDKIT) overhead --model $(MODEL) $(if $(FRAMEWORK),--framework $(FRAMEWORK))

clean:
	rm -rf $(VENV) .venvs
