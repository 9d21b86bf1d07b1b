# Common tasks. `make test` is what CI runs (through .ci/run).
#
# Build output goes to $CARGO_TARGET_DIR when set (CI keeps it in a cache outside the checkout).

CARGO ?= cargo

.PHONY: build test unit lint fmt crds crds-check bench e2e catalog

build:
	$(CARGO) build --release

# Every check: formatting, lints, generated files, unit, property and integration tests.
test: lint
	$(CARGO) test --all-targets
	$(CARGO) test --doc

unit:
	$(CARGO) test --lib

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# Regenerate crds/ and charts/karpenter-azure/crds/ from the API types.
crds:
	$(CARGO) run --quiet -- crdgen

bench:
	$(CARGO) bench

catalog:
	$(CARGO) run --release -- catalog --region eastus
