"""The demo: ``python -m devtools.demo`` (``make demo``) plays every capability of Troupe,
and how each failure looks, on a local cluster of 32 fake GPU nodes (or an existing one),
narrating each step and checking what it shows.

- :mod:`devtools.demo.__main__`: the command line, starting the local cluster and Troupe,
  the summary;
- :mod:`devtools.demo.scenarios`: the scenarios, one function each, in :data:`SCENARIOS`;
- :mod:`devtools.demo.stage`: what they act on (cluster, kubectl, narration, waits, the
  topology read from the nodes);
- :mod:`devtools.demo.snapshot`: makes ``examples/snapshot.json``, the instant look that
  needs no cluster.

Developer tooling: not in the wheel or the image, and nothing that ships imports it.
"""
