"""The filters: kube-scheduler's node filters for what Troupe models, with their reasons.

Above the ledger (:mod:`reconciler.engine.ledger`), below placement:

- :mod:`.node`: the filters of one node for one pod (Ready, unschedulable, taints, node
  selection, resources) and the order reasons are listed in;
- :mod:`.gang` (with :mod:`.counters`): the filters that look at the pods around a member,
  counted per domain, the gang's own members included;
- :mod:`.unmodeled`: what a member asks of kube-scheduler that the engine does not model.
"""
