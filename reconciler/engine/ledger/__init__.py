"""The ledger: who uses what on which node, over the topology, for one decision.

Built from the model (:mod:`reconciler.engine.model`) and nothing above it:

- :mod:`.topology`: the levels, each node's path and the immutable domain tree;
- :mod:`.nodetable`: what a snapshot derives from its nodes alone, shared while only pods
  change;
- :mod:`.draunits`: DRA devices counted as units, what nodes offer and pods request
  (the objects parsed by :mod:`reconciler.engine.model.dra`);
- :mod:`.recordindex`: the nodes the reconciler's plan and nomination records hold;
- :mod:`.snapshot`: :class:`~.snapshot.Snapshot`, the capacity ledger every plan is made
  on (free units per node and resource, plans applied with an undo), over
  :mod:`.podindex`, the one pass that sorts out the pods it looks at again;
- :mod:`.occupancy`: the same ledger as a tree of domains, for ``kubectl troupe topology``
  and the map.
"""
