"""Placement: where every member of a gang goes, all of them or none.

Above the filters (:mod:`reconciler.engine.filters`), below gangs:

- :mod:`.place`: :func:`~.place.place_gang`, the entry, and its
  :class:`~.place.PlacementResult`;
- :mod:`.shapes`, :mod:`.selection`, :mod:`.fill`: members grouped by shape, nodes chosen
  inside one domain (exact and greedy), and the member-by-member fill;
- :mod:`.layers`: slices, balanced spread and exclusive domains;
- :mod:`.devicegroups`: gangs whose members share devices (SharedDeviceGroups);
- :mod:`.shortfall`: why a gang does not fit, domain by domain.
"""
