"""Gangs: what a gang is and what happens to it over time, short of a decision.

Above placement (:mod:`reconciler.engine.placement`), below preemption:

- :mod:`.gang`: :class:`~.gang.Gang`, parsed once from its pods and its workload, shaped
  by the source that declares it (:mod:`reconciler.engine.model.declared`);
- :mod:`.lifecycle`: the phases and the ordered rules that pick one (the table);
- :mod:`.clocks`, :mod:`.failures`, :mod:`.refusals`, :mod:`.avoidance`: release clocks,
  members that failed, kube-scheduler's refusals read back, and nodes a gang avoids;
- :mod:`.minimum`: the first release of a gang with a minimum size;
- :mod:`.nominated`, :mod:`.nominating`: a preemptor's nomination and the nodes it holds;
- :mod:`.queueing`: the queue order and what a gang ahead holds from those behind.
"""
