# Common tasks. `make test` is what CI runs (through .ci/run).
#
# Build output goes to $CARGO_TARGET_DIR when set (CI keeps it in a cache outside the checkout).

CARGO ?= cargo

.PHONY: build deps test unit lint fmt crds crds-check bench bench-upstream e2e controlplane catalog

build:
	$(CARGO) build --release

# Install what the tests need (rustup components and the musl target, Debian's musl-tools and
# prometheus, the e2e control plane); quick when everything is there.
deps:
	hack/deps.sh

# Every check: formatting, lints, generated files, unit, property, integration, e2e and image tests.
# Runs every stage and every test binary even when one fails, then prints each stage's time and result.
test:
	CARGO=$(CARGO) hack/test.sh

unit:
	$(CARGO) test --workspace --lib

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --test container_image -- -D warnings

fmt:
	$(CARGO) fmt --all

# Regenerate crds/ and charts/karpenter-azure/crds/ from the API types.
crds:
	$(CARGO) run --quiet -- crdgen

# Solver benchmarks (upstream's scheduling benchmark and a mixed eastus workload); prints numbers.
bench:
	$(CARGO) run --release -- bench

# Our solver next to upstream Karpenter's scheduler on upstream's own benchmark input: generates and
# solves it with upstream (hack/upstream-bench.sh, Go; see hack/upstream-bench/README.md), then times
# our solve per size in its own process and checks both plans with the feasibility checker.
# BENCH_UPSTREAM_ARGS passes options such as --solve-timeout 600 or --output json.
# BENCH_UPSTREAM_CURVE are more sizes of the same input that only our solver runs (upstream's scheduler
# takes a quarter of an hour at 50,000 pods here), for the solve-time curve against n log n.
BENCH_UPSTREAM_DIR ?= $${CARGO_TARGET_DIR:-target}/bench-upstream
BENCH_UPSTREAM_SIZES ?= 1000 5000 20000
BENCH_UPSTREAM_CURVE ?= 2000 10000 50000
BENCH_UPSTREAM_ARGS ?=
bench-upstream:
	hack/upstream-bench.sh run "$(BENCH_UPSTREAM_DIR)" $(BENCH_UPSTREAM_SIZES)
	$(if $(strip $(BENCH_UPSTREAM_CURVE)),hack/upstream-bench.sh input "$(BENCH_UPSTREAM_DIR)" $(BENCH_UPSTREAM_CURVE))
	$(CARGO) build --release
	"$${CARGO_TARGET_DIR:-target}/release/karpenter-azure" bench-upstream $(BENCH_UPSTREAM_ARGS) "$(BENCH_UPSTREAM_DIR)" $(BENCH_UPSTREAM_SIZES) $(BENCH_UPSTREAM_CURVE)

# The e2e control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, helm),
# built from pinned Go modules into ~/.cache/karpenter-azure/controlplane: ~10 min cold, instant
# once cached. See hack/controlplane/README.md.
controlplane:
	hack/e2e-cluster.sh build >/dev/null

# End-to-end tests (tests/e2e) against that control plane; one cluster per run, about 8 s to start.
e2e: controlplane
	$(CARGO) test --test e2e

catalog:
	$(CARGO) run --release -- catalog --region eastus
