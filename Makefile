# Common tasks. `make test` is what CI runs (through .ci/run).
#
# Build output goes to $CARGO_TARGET_DIR when set (CI keeps it in a cache outside the checkout).

CARGO ?= cargo

.PHONY: build deps test unit proptest-random lint fmt crds crds-check metrics-table bench bench-upstream bench-upstream-disruption e2e controlplane catalog \
	soak scale playground playground-down image

build:
	$(CARGO) build --release

# Install what the tests need (rustup components and the musl targets, the Dockerfile's pinned ziglang and
# cargo-zigbuild, Debian's prometheus, the e2e control plane); quick when everything is there.
deps:
	hack/deps.sh

# Every check: formatting, lints, generated files, unit, property, integration, e2e and image tests.
# Runs every stage and every test binary even when one fails, then prints each stage's time and result.
test:
	CARGO=$(CARGO) hack/test.sh

unit:
	$(CARGO) test --workspace --lib

# The property tests (every `proptest!` test of crates/core/src/, src/ and tests/integration/), by name; the integration
# module property_tests checks that the list is complete. `make test` runs them from one fixed seed
# (crates/core/src/proptest_config.rs); `proptest-random` runs them PROPTEST_RUNS times, each
# with a fresh random seed that it prints first, and stops at the first failure (docs/development.md).
PROPTEST_TESTS = intersection_agrees_with_concrete_labels intersection_is_commutative \
	emptiness_is_exact_on_the_sampled_universe matches_agrees_with_admits format_then_parse_is_identity \
	small_inputs_give_feasible_deterministic_plans medium_inputs_give_feasible_deterministic_plans \
	decisions_are_deterministic_within_budgets_and_never_cost_more the_index_never_goes_back_in_time \
	prices_stay_sorted_and_non_negative \
	every_pass_to_the_fixpoint_keeps_every_pod_budget_and_pdb_and_never_raises_the_price \
	a_solve_on_the_pass_base_places_pods_as_the_solve_of_the_listed_input a_moves_sketch_says_what_its_outcome_says
PROPTEST_RUNS ?= 10
proptest-random:
	@for run in $$(seq $(PROPTEST_RUNS)); do \
		seed=$$(od -An -N8 -tu8 /dev/urandom | tr -d ' '); \
		echo "proptest-random: run $$run of $(PROPTEST_RUNS), PROPTEST_RNG_SEED=$$seed"; \
		for target in "--workspace --lib" "--test integration"; do \
			PROPTEST_RNG_SEED=$$seed $(CARGO) test --quiet $$target -- $(PROPTEST_TESTS) || { \
				echo "proptest-random: failed with PROPTEST_RNG_SEED=$$seed (cargo test $$target)"; exit 1; }; \
		done; \
	done

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --test container_image -- -D warnings

fmt:
	$(CARGO) fmt --all

# Regenerate crds/ and charts/karpenter-azure/crds/ from the API types.
crds:
	$(CARGO) run --quiet -- crdgen

# Regenerate the metric table of docs/controller.md from the metrics registry.
metrics-table:
	$(CARGO) run --quiet -- metrics-table --write docs/controller.md

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

# Upstream Karpenter's disruption pass next to ours on clusters packed by upstream's provisioner from
# its scheduling benchmark's pods (hack/upstream-disruption.sh; sizes in nodes, four shapes, both
# consolidation policies). Needs the e2e control plane's kube-apiserver and etcd (make controlplane) or
# KUBEBUILDER_ASSETS. See hack/upstream-bench/README.md.
BENCH_UPSTREAM_DISRUPTION_DIR ?= $${CARGO_TARGET_DIR:-target}/bench-upstream-disruption
BENCH_UPSTREAM_DISRUPTION_SIZES ?= 100 500
bench-upstream-disruption:
	hack/upstream-disruption.sh run "$(BENCH_UPSTREAM_DISRUPTION_DIR)" $(BENCH_UPSTREAM_DISRUPTION_SIZES)
	$(CARGO) build --release
	"$${CARGO_TARGET_DIR:-target}/release/karpenter-azure" bench-upstream-disruption "$(BENCH_UPSTREAM_DISRUPTION_DIR)" $(BENCH_UPSTREAM_DISRUPTION_SIZES)

# The e2e control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, helm),
# built from pinned Go modules into ~/.cache/karpenter-azure/controlplane: ~10 min cold, instant
# once cached. See hack/controlplane/README.md.
controlplane:
	hack/e2e-cluster.sh build >/dev/null

# End-to-end tests (tests/e2e) against that control plane; one cluster per run, about 8 s to start.
e2e: controlplane
	$(CARGO) test --test e2e

# The chaos soak (tests/e2e/soak.rs): two replicas against the e2e control plane and the fake ARM under
# a schedule of faults for SOAK_MINUTES; prints each fault's recovery time and a `soak: ...` summary
# line, and fails when an invariant broke. `make test` runs it for 5 minutes.
SOAK_MINUTES ?= 30
soak: controlplane
	SOAK_MINUTES=$(SOAK_MINUTES) $(CARGO) test --test e2e soak -- --ignored --nocapture

# The scale benchmark (tests/e2e/scale.rs): one controller on the e2e control plane, grown through its
# own provisioning to each node count of SCALE_STEPS (SCALE_PODS_PER_NODE pods per node); prints a row
# per step (burst decision, consolidation pass, start-up, RSS, API requests per second) and where growth
# stopped. Built with the release profile, so the controller and the fake ARM are what a user would run.
SCALE_STEPS ?= 1000,2000,3000,4000,5000
SCALE_PODS_PER_NODE ?= 10
scale: controlplane
	SCALE_STEPS=$(SCALE_STEPS) SCALE_PODS_PER_NODE=$(SCALE_PODS_PER_NODE) \
		$(CARGO) test --release --test e2e scale::a_controller_grows_toward_5000_nodes -- --ignored --nocapture

catalog:
	$(CARGO) run --release -- catalog --region eastus

# The controller on this machine against a local control plane (kwok simulates the kubelets) and the fake
# Azure Resource Manager (hack/playground.sh): prints how to point kubectl at it and what to try.
# State, pids and logs live in <cargo target directory>/playground, or PLAYGROUND_DIR when set.
playground:
	CARGO=$(CARGO) hack/playground.sh up

# Stops exactly the processes `make playground` started.
playground-down:
	CARGO=$(CARGO) hack/playground.sh down

# The image's binary for IMAGE_ARCH (amd64 or arm64) without a container engine: the Dockerfile's build
# stage with its layer caching (hack/image-build.sh); prints the path of the static binary.
IMAGE_ARCH ?= amd64
image:
	hack/image-build.sh $(IMAGE_ARCH)
