"""Helpers the test modules share, in one place: builders of the webhook's objects (the builders
the benchmarks share too are the ``testbed`` package); the gang controller's in-memory harness; waits and builders
for tests on the local control plane; helm; snapshots for the offline tools; the release
ledger of the SIGKILL and SIGSTOP tests. Test modules import from here, never from each other."""
