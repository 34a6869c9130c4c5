"""The filters: kube-scheduler's filter plugins for what Troupe models, laid out as
kube-scheduler lays them out (``pkg/scheduler/framework/plugins/<name>``), with typed
statuses. Above the ledger (:mod:`reconciler.engine.ledger`), below placement:

- :mod:`.status`: a plugin's :class:`~.status.Status` (code, plugin, reasons), its
  :class:`~.status.PreFilterState` for one gang (made from a :class:`~.status.Cycle`) and
  its :class:`~.status.Registered` entry;
- one module per plugin, each holding its checks, its reasons as kube-scheduler words
  them and, for a plugin that reads the member beyond its node filter or the pods around
  it, its PreFilter state with the counts it keeps (``AddPod``/``RemovePod``):
  :mod:`.nodeunschedulable`, :mod:`.nodename`, :mod:`.tainttoleration`,
  :mod:`.nodeaffinity`, :mod:`.nodeports`, :mod:`.noderesources`,
  :mod:`.volumerestrictions`, :mod:`.nodevolumelimits`, :mod:`.volumebinding`,
  :mod:`.volumezone`, :mod:`.podtopologyspread`, :mod:`.interpodaffinity`,
  :mod:`.dynamicresources`;
- :mod:`.profile`: the plugins in kube-scheduler's default profile order, the one place
  a plugin is registered, and the order reasons are listed in;
- :mod:`.gang`: the loop that runs the plugins' states for one gang in profile order, for
  placement and for the shortfall alike (:class:`~.gang.GangFilters`);
- :mod:`.unmodeled`: what a member asks of kube-scheduler that the engine does not model.
"""
