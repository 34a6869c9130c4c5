"""The filters: kube-scheduler's filter plugins for what Troupe models, laid out as
kube-scheduler lays them out (``pkg/scheduler/framework/plugins/<name>``), with typed
statuses. Above the ledger (:mod:`reconciler.engine.ledger`), below placement:

- :mod:`.status`: a plugin's :class:`~.status.Status` (code, plugin, reasons) and its
  :class:`~.status.Registered` entry;
- one module per plugin, each holding its checks and its reasons as kube-scheduler words
  them: :mod:`.nodeunschedulable`, :mod:`.nodename`, :mod:`.tainttoleration`,
  :mod:`.nodeaffinity`, :mod:`.nodeports`, :mod:`.noderesources`,
  :mod:`.volumerestrictions`, :mod:`.nodevolumelimits`, :mod:`.volumebinding`,
  :mod:`.volumezone`, :mod:`.podtopologyspread`, :mod:`.interpodaffinity`,
  :mod:`.dynamicresources`;
- :mod:`.profile`: the plugins in kube-scheduler's default profile order, the one place
  a plugin is registered, and the order reasons are listed in;
- :mod:`.gang` (with :mod:`.counters`): the PreFilter state of the plugins that read the
  pods around a member, counted per domain, the gang's own members included;
- :mod:`.unmodeled`: what a member asks of kube-scheduler that the engine does not model.
"""
