# goalkeeper: `make dev` runs everything locally, `make test` runs every test.
.PHONY: install k8s helm image crds lint test test-unit bench faults trials dev clean

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

# The project's virtual environment, reinstalled when pyproject.toml changes.
$(BIN)/goalkeeper: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,local,mcp]'
	touch $@

install: $(BIN)/goalkeeper

# Build the local control plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl) into ~/.cache/goalkeeper/k8s-v1.37.2 if they are missing.
k8s:
	scripts/build-k8s.sh

# Build the pinned helm CLI into ~/.cache/goalkeeper/helm-v4.3.2 if it is missing.
helm:
	scripts/build-helm.sh

# Build the operator and step image (root: installs dockerd and debootstrap when missing).
image:
	scripts/build-image.sh

crds: install
	$(BIN)/goalkeeper crds
	$(BIN)/goalkeeper crds --out charts/goalkeeper/crds

lint: install
	$(BIN)/ruff check operator tests bench
	$(BIN)/ruff format --check operator tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# Unit tests, then the cluster and end-to-end tests against a real local control plane.
test: install k8s helm lint
	$(BIN)/pytest

test-unit: install
	$(BIN)/pytest tests/unit

# The operator's check path against a local control plane: tables on stdout (bench/README.md).
# BENCH_FLAGS=--quick for small sizes, --large for 10,000 and 50,000 idle monitors.
bench: install k8s
	$(BIN)/python -m bench $(BENCH_FLAGS)

# The fault suite over SEEDS random seeds (FAULT_SEEDS="N M": those seeds first), one run
# after another, one line per seed (bench/faults.py). `make test` runs it with one seed.
SEEDS ?= 20
FAULT_SEEDS ?=
faults: install k8s
	$(BIN)/python -m bench.faults --seeds $(SEEDS) $(foreach s,$(FAULT_SEEDS),--seed $(s))

# Goal trials: does a Monitor finish the goals people hand it, with the configured model
# (the embedded local one when GOALKEEPER_MODEL is unset)? TRIALS_FLAGS: scenario names,
# --parallel N, --repeat N (pass rates over N runs), --json PATH (bench/README.md).
trials: install k8s
	$(BIN)/python -m bench.goals $(TRIALS_FLAGS)

dev: install k8s
	$(BIN)/goalkeeper dev

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
