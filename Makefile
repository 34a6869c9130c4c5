# The two commands of the README, and the pieces they are made of.
#   make demo   a local control plane of 42 GPU nodes (8 with DRA devices), Troupe, and eleven scenarios, each narrated and checked
#   make test   lint + unit, property, HTTPS and end-to-end tests (builds what it needs first)
#   make test-compat  the end-to-end tests of every API Troupe uses, on the oldest Kubernetes the chart claims
#   make plugin this platform's krew archive of kubectl troupe, and its manifest, in dist/
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

# The suite runs on PYTEST_WORKERS processes (pytest-xdist), each test module whole on one of
# them: the end-to-end tests mostly wait on the control plane, so three workers, each with the
# control plane of its own, keep two cores busy (tests/e2e/conftest.py says why, and in what order;
# docs/decisions/081-three-test-workers.md what two and three measured).
# PYTEST_WORKERS=0 runs everything in one process.
PYTEST_WORKERS ?= 3
PARALLEL := -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder

.PHONY: demo plugin snapshot test test-compat lint unit e2e browser bench bench-web bench-gang-objects bench-servers bench-simulate bench-preemption bench-scale bench-stream bench-preemption-cluster bench-throughput bench-kills bench-memory bench-hostile bench-backfill bench-backfill-cluster cluster-build cluster-up cluster-down clean lock release-check chart-kinds

# actionlint (https://github.com/rhysd/actionlint), the linter of GitHub Actions workflows,
# built once from its Go module into the version-keyed cache the control plane's binaries
# use (devtools/devcluster/build.py), so `make lint` checks .github/workflows/.
TROUPE_CACHE_DIR ?= $(HOME)/.cache/troupe
ACTIONLINT_VERSION := v1.7.12
ACTIONLINT := $(TROUPE_CACHE_DIR)/actionlint-$(ACTIONLINT_VERSION)/bin/actionlint

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint,dist]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python -m devtools.demo

# kubectl troupe as krew installs it (devtools/krew.py, docs/decisions/055-plugin-executable.md):
# PyInstaller (the dist extra, pinned) makes the plugin one executable for this platform from
# the venv, with requirements.lock's versions installed first; dist/kubectl-troupe-<os>-<arch>.tar.gz
# holds it and LICENSE, and dist/troupe.yaml is plugins/troupe.yaml with that archive's sha256:
#   kubectl krew install --manifest=dist/troupe.yaml --archive=dist/kubectl-troupe-<os>-<arch>.tar.gz
# About a minute and a half on two cores; the release workflow runs it on each platform.
plugin: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements.lock
	$(BIN)/python -m devtools.krew build

# examples/snapshot.json, the look at Troupe that needs no cluster, made on the demo's cluster.
snapshot: $(BIN)/.installed cluster-build
	$(BIN)/python -m devtools.demo.snapshot

test: $(BIN)/.installed cluster-build browser lint
	$(BIN)/python -m pytest $(PARALLEL)

# The compatibility run (CI runs it after `make test`): the end-to-end tests that between them
# use every API Troupe reads and writes (pods and their gates, bindings and evictions, nodes
# and taints, Jobs, JobSets, LeaderWorkerSets and PyTorchJobs, Gang objects, leases, the
# state ConfigMap, DRA, the Workload API's PodGroups (v1alpha2 there) and the peers', the chart's
# webhook and admission policies, token and access reviews),
# on the oldest Kubernetes release the chart's kubeVersion admits. Its control plane is built
# into the same cache the first time (about 4 minutes on two cores: it shares the compiled packages), the rest is shared.
COMPAT_KUBERNETES_VERSION := v1.36.3
COMPAT_TESTS := tests/e2e/test_devcluster.py tests/e2e/test_gang_release.py tests/e2e/test_workload_gangs.py \
	tests/e2e/test_preemption.py tests/e2e/test_dra_gangs.py tests/e2e/test_gang_objects.py \
	tests/e2e/test_leader_election.py tests/e2e/test_failing_nodes.py tests/e2e/test_chart_write_policies.py \
	tests/e2e/test_topology_map.py tests/e2e/test_admission_e2e.py tests/e2e/test_pod_groups.py

test-compat: $(BIN)/.installed cluster-build
	TROUPE_KUBERNETES_VERSION=$(COMPAT_KUBERNETES_VERSION) $(BIN)/python -m devtools.devcluster build
	TROUPE_KUBERNETES_VERSION=$(COMPAT_KUBERNETES_VERSION) $(BIN)/python -m pytest $(PARALLEL) $(COMPAT_TESTS)

lint: $(BIN)/.installed $(ACTIONLINT)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m devtools.codeshape
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile
	$(ACTIONLINT) -no-color

$(ACTIONLINT):
	GOBIN=$(dir $@) go install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)

unit: $(BIN)/.installed browser
	$(BIN)/python -m pytest $(PARALLEL) -m 'not e2e'

e2e: $(BIN)/.installed cluster-build browser
	$(BIN)/python -m pytest $(PARALLEL) -m e2e

# Headless Chromium (the Debian package), which the topology map's tests load the page in.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

bench: $(BIN)/.installed
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk) \
	  || echo "wrk not installed: benchmarks/webhook_load.py falls back to a Python client"
	$(BIN)/python benchmarks/placement.py
	$(BIN)/python benchmarks/reconcile.py
	$(BIN)/python benchmarks/as_created.py
	$(BIN)/python benchmarks/webhook_load.py
	$(BIN)/python benchmarks/simulate_snapshot.py
	$(BIN)/python benchmarks/preemption.py
	$(BIN)/python benchmarks/kubectl_troupe.py
	$(BIN)/python benchmarks/gang_objects.py --gangs 250
	$(BIN)/python benchmarks/dra.py

# Gang objects at 2,000 gangs: the writes the sink makes against one per decision and what it
# adds to a reconcile (16,000 in-memory reconciles), then creates and status writes against
# the local control plane (docs/decisions/043-gang-objects.md; about 20 minutes; `make bench`
# runs the first part at 250 gangs).
bench-gang-objects: $(BIN)/.installed cluster-build
	$(BIN)/python benchmarks/gang_objects.py --api-server

# Troupe's webhook server against uvicorn and hypercorn on slow clients, amplifying reviews,
# pipelining, idle connections and throughput (docs/decisions/028; about 3 minutes).
bench-servers: $(BIN)/.installed
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk) || true
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/webhook_servers.py

# The topology map at 2,048 and 8,192 nodes: its data's cost in kubectl troupe and the
# reconciler, and the page's draw in headless Chromium (docs/decisions/042; about 2 minutes).
bench-web: $(BIN)/.installed browser
	$(BIN)/python benchmarks/topology_map.py

bench-simulate: $(BIN)/.installed
	$(BIN)/python benchmarks/simulate_snapshot.py

# The preemption planner against the Volcano proposal's heuristic, and brute force on small
# instances (about 35 s; --quick: about 15 s).
bench-preemption: $(BIN)/.installed
	$(BIN)/python benchmarks/preemption.py
# The reconciler's cache with 8,192 nodes and 20,000 pods of realistic size: resident
# memory at steady state and at the peak of a re-list, objects whole against retained
# (about 3 minutes); the chart's reconciler memory comes from it.
bench-memory: $(BIN)/.installed
	$(BIN)/python benchmarks/cache_memory.py
# The worst decision time and memory each kind of hostile tenant object costs another
# tenant's gang on 1,024 nodes, against an ordinary gang (docs/decisions/049; about 1 minute).
bench-hostile: $(BIN)/.installed
	$(BIN)/python benchmarks/hostile.py
# What queueingStrategy Backfill adds to a decision cycle of 200 waiting gangs on 2,048
# nodes, against BestEffortFIFO in the same process (docs/decisions/079; about 20 s).
bench-backfill: $(BIN)/.installed
	$(BIN)/python benchmarks/backfill.py
# A big gang under a stream of small Jobs with deadlines on the local control plane, under
# StrictFIFO, BestEffortFIFO and Backfill (about 15 minutes a seed; BACKFILL_SEEDS=1,2,3 runs
# each strategy on three streams and prints the medians).
BACKFILL_SEEDS ?= 1
bench-backfill-cluster: $(BIN)/.installed cluster-build
	$(BIN)/python benchmarks/backfill_cluster.py --seeds $(BACKFILL_SEEDS)

# All-or-nothing under SIGKILL at the scale of the measured result: 20 kills mid-release of
# 40 gangs of 32-64 members (about 7 minutes; the suite runs 8 kills).
bench-kills: $(BIN)/.installed cluster-build
	TROUPE_KILL_ROUNDS=20 $(BIN)/python -m pytest -s -p no:cacheprovider tests/e2e/test_release_kills.py

# Indexed Jobs of 64, 256, 512 and 1,024 whole-node pods on 2,048 kwok nodes, plain and as
# one gang released AsCreated and WhenComplete; not part of `bench`, which needs no control
# plane. Two invocations, each on a cluster of its own: first with kube-controller-manager
# and kube-scheduler at their default client rates (the comparison), then with both raised
# to 500 requests/s, burst 1000 (the floor: Troupe's own share). About 30 minutes on two
# busy cores (measured: 64-512 took 8 min at default rates, 9 raised; 1,024 alone 8.5 min
# at default rates; see benchmarks/scale.py). Each size also prints the Job's timeline by
# stage (the reservation, the first and last member created, ungated, bound, Running), the
# plain Job and the gangs side by side with the difference (benchmarks/timeline.py).
# The first invocation also measures the rows that need no control plane (the reconciler's
# memory at 8,192 nodes + 100,000 pods, a decision and release of 1,024 members with two slice
# layers, kubectl troupe plan/status on a snapshot of that size; benchmarks/scale_inprocess.py)
# and ends with one table of every target of issue 37. SCALE=inprocess: those rows alone
# (about 15 minutes, no control plane).
SCALE ?= all
bench-scale: $(BIN)/.installed $(if $(filter inprocess,$(SCALE)),,cluster-build)
ifeq ($(SCALE),inprocess)
	$(BIN)/python benchmarks/scale.py --only inprocess
else
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/scale.py --only cluster --component-qps 500 --component-burst 1000
endif

# A stream of 2,000 gangs of 8 one-GPU members created evenly over 60 s on 2,048 kwok nodes,
# after as many plain Jobs, each stream on a clean cluster (issue 37): each Job's seconds to
# all Running (median, p99, max), gang/plain at the median and p99, every gang Running, the
# queue-order inversions (benchmarks/stream.py). Not measured at that size on two cores: the
# Job controller creates pods at 20 a second by default, so each stream's 16,000 pods take
# at least 13 minutes, about 40 minutes in all. Measured at a small size (100 gangs of 4 over
# 20 s on 128 nodes: STREAM_ARGS="--gangs 100 --members 4 --seconds 20 --topology 1x2x64"):
# about 2 minutes with the control plane's start.
STREAM_ARGS ?=
bench-stream: $(BIN)/.installed cluster-build
	$(BIN)/python benchmarks/stream.py $(STREAM_ARGS)

# Gang preemption on the control plane (issue 45): a Job of 64 whole-node pods (PriorityClass
# high) on 512 kwok nodes full of 64 Jobs of 8 (PriorityClass low), twice on the same
# cluster: kube-scheduler's own pod-by-pod preemption of the Jobs without Troupe keys, then
# Troupe's (gangPreemptionMode atomic, each Job a gang, the preemptor required in one
# subblock). Prints each run's seconds to all Running, subblocks spanned, victim Jobs left
# partly running and disturbed, Troupe/kube-scheduler against 1.2x, and the preemptor's
# timeline by stage (benchmarks/preemption_cluster.py). About 5 minutes on two busy cores;
# at small scale, PREEMPTION_ARGS="--topology 1x2x32 --victims 8 --preemptor 8": under a minute.
PREEMPTION_ARGS ?=
bench-preemption-cluster: $(BIN)/.installed cluster-build
	$(BIN)/python benchmarks/preemption_cluster.py $(PREEMPTION_ARGS)
# 500 gangs of 4 two-GPU pods created at once on 2,048 kwok nodes, each gang required in one
# subblock (issue 45): placed by kube-scheduler alone (the same pods, no gang keys), by Troupe,
# and by kube-scheduler's own gang plugin (v1beta1 PodGroups; GenericWorkload and
# TopologyAwareWorkloadScheduling on, Troupe off), one after the other on one cluster; prints
# each mode's pods Running per second, a gang's median and p90, the creation rate, the gangs
# over more than one subblock, troupe/plain and native/plain, and a table for
# docs/guide/results.md (benchmarks/throughput.py). About 10 minutes on two quiet cores.
# THROUGHPUT_ARGS="--shape perf-750x4" (or perf-3x1000): scheduler_perf's shapes of KEP-5732 on
# 5,000 kwok nodes in 50 racks; "--gangs 40 --members 4 --topology 1x4x16": a small run (about
# 3 minutes).
THROUGHPUT_ARGS ?=
bench-throughput: $(BIN)/.installed cluster-build
	$(BIN)/python benchmarks/throughput.py $(THROUGHPUT_ARGS)

# The chart's per-kind and per-pod-group parts, rendered from troupe/workloadkinds.py and
# troupe/podgroups.py (docs/decisions/071-the-chart-is-rendered-from-the-registries.md).
chart-kinds: $(BIN)/.installed
	$(BIN)/python -m devtools.chartkinds

cluster-build: $(BIN)/.installed
	$(BIN)/python -m devtools.devcluster build

cluster-up: $(BIN)/.installed
	$(BIN)/python -m devtools.devcluster up

cluster-down: $(BIN)/.installed
	$(BIN)/python -m devtools.devcluster down

# The image's dependency lock (Dockerfile installs it with --require-hashes): every runtime
# dependency of pyproject.toml, pinned, with the sha256 of each of its files on PyPI.
LOCK_COMPILE = $(BIN)/uv pip compile pyproject.toml --generate-hashes --python-version 3.11 \
	  --python-platform x86_64-unknown-linux-gnu --no-header --quiet
lock: $(BIN)/.installed
	$(LOCK_COMPILE) -o requirements.lock

# Every step of a release that needs no registry (.github/workflows/release.yml runs it
# first), into dist/: the version is the same everywhere; requirements.lock is what
# pyproject.toml locks to now (uv keeps the pins of the lock it is given, so only a change
# of pyproject.toml's dependencies changes it) and every pinned file of it, for each
# platform the image is built for, downloads hash-checked as the Dockerfile's install does;
# the chart linted and packaged; the wheel and the sdist built (python -m build) and checked.
# HELM=path uses that helm instead of building the pinned one (make cluster-build).
HELM ?=
IMAGE_PLATFORMS := x86_64 aarch64
release-check: $(BIN)/.installed $(if $(HELM),,cluster-build)
	$(BIN)/python -m pip install --quiet -e '.[release]'
	$(BIN)/python -m devtools.release versions
	rm -rf dist && mkdir -p dist
	cp requirements.lock dist/requirements.lock
	$(LOCK_COMPILE) -o dist/requirements.lock
	@cmp -s requirements.lock dist/requirements.lock || { diff -u requirements.lock dist/requirements.lock | head -40; \
	  echo "requirements.lock is not what pyproject.toml locks to: run make lock"; exit 1; }
	for arch in $(IMAGE_PLATFORMS); do \
	  $(BIN)/python -m pip download --quiet --no-deps --require-hashes --only-binary=:all: --python-version 3.11 \
	    --implementation cp --platform manylinux_2_28_$$arch --platform manylinux2014_$$arch \
	    -d dist/lock-$$arch -r requirements.lock || exit 1; done
	$(BIN)/python -m devtools.release chart dist $(if $(HELM),--helm $(HELM))
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m devtools.release artifacts dist

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
