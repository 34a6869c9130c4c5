"""``python -m reconciler run``: informers -> cache -> work queue -> gang controller -> writes.

One worker decides the gangs, so two gangs are never planned against the same free
capacity: in passes over the keys ready in the queue, each pass's gangs in queue order on
one snapshot, each release applied to it before the next gang is decided. A release's
members are assumed in the cache the moment it is decided and written on the release
threads (its members in parallel, ``releaseConcurrency``; several releases at once) while
the worker goes on; a gang's key is handed back to the queue once its writes are done
(docs/decisions/068-release-pipeline.md).
Pod and node watches keep the cache current. An event re-queues only the gangs it can
help (docs/decisions/019-queue-order.md): a gang's own pods, and, for a change that may
make room (a pod deleted or finished, a node whose labels, taints, readiness or capacity
changed), the gangs waiting for room that some gated member could run on that node; a gang
the event cannot help keeps its backoff. The worker takes the highest-priority gang first,
and namespaces of equal priority in turn. On start (and on taking over) every waiting gang
is decided once in queue order before anything is written, so a new leader holds and
blocks as the old one did.

The HTTP server (``--metrics-bind``) serves ``/metrics`` (Prometheus), ``/healthz`` (the
worker thread is alive and not stuck on one gang, and every informer lists and watches;
else 503 with the reason), ``/readyz`` (caches synced and leading, or standing by as a
follower; JSON body ``{"ready", "role", "synced", "waiting_for"}``, the last naming the
informers that have not listed yet) and ``/debug/gangs`` (every gang's last phase and
reason, JSON).

With leader election, every write passes the elector's fence, and a clean shutdown
closes it, drains the writes in flight and releases the Lease
(docs/decisions/016-bounded-failure-detection.md).

Its parts: :mod:`~reconciler.run.reconciler` (the informers, the queue and the threads),
:mod:`~reconciler.run.worker` (the worker's passes and the metrics of each reconcile), :mod:`~reconciler.run.controllers` (the controllers,
each wired to the writer ports it writes through), :mod:`~reconciler.run.probes` (the HTTP
server) and :mod:`~reconciler.run.process` (the process: clients, election, signals). Each is
imported from its module: the controllers' wiring, which the controller tests and the
benchmarks use over the in-memory fakes, does not load the Kubernetes client with the
process.
"""
