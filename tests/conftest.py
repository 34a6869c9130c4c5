"""Settings every test module shares.

Hypothesis' per-example deadline (200 ms by default) is off: examples are checked for what
they decide, not for how fast, and on two cores shared with end-to-end tests an example may
take longer than the deadline for reasons that are not the code's (timing belongs in the
benchmarks, benchmarks/)."""

from hypothesis import settings

settings.register_profile("troupe", deadline=None)
settings.load_profile("troupe")
