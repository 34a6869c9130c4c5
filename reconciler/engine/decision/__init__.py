"""The decision: one value per gang, which the reconciler and the simulator both act on.

The top room of the engine:

- :mod:`.decide`: :func:`~.decide.decide`, the lifecycle rules' builders;
  :mod:`.seen`: :class:`~.seen.Decision` and what one decision sees of its gang;
- :mod:`.ascreated`: the decisions of a gang released as created;
- :mod:`.actions`: the typed actions a decision holds;
- :mod:`.step`: :func:`~.step.step`, a decision and what it means for the queue behind;
- :mod:`.conditions` and :mod:`.gangobject`: the pod condition and the Gang object's
  status a decision renders to.
"""
