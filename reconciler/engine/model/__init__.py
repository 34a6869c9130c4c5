"""The model: cluster objects as the engine reads them, parsed once into plain values.

The bottom room of the engine; it imports no other room. Everything here is a value read
from a Kubernetes object (a dict in the JSON shape) or a rule of one, never a plan:

- :mod:`.fields`, :mod:`.quantity`, :mod:`.resources`, :mod:`.timestamps`, :mod:`.text`:
  typed reads naming the bad field, exact quantities, a pod's requests and a node's
  allocatable in kube-scheduler's units, RFC 3339 times, plural words;
- :mod:`.selectors`: taints, tolerations, node selector terms and a pod's
  :class:`~.selectors.NodeFilter`;
- :mod:`.podterms`: what a pod asks of the pods around it (pod affinity, spread
  constraints), of its node's ports and of its volumes;
- :mod:`.nodes` and :mod:`.pods`: :class:`~.nodes.NodeInfo` and :class:`~.pods.PodInfo`;
- :mod:`.volumes`: PersistentVolumeClaims, PersistentVolumes and CSINodes;
  :mod:`.dra` (with :mod:`.cel`): ResourceSlices, DeviceClasses, ResourceClaims and their
  templates (counted as units by the ledger); :mod:`.devicegroups`: SharedDeviceGroups
  and device IDs; :mod:`.budgets`: PodDisruptionBudgets;
- :mod:`.records` and :mod:`.reservations`: what the reconciler writes and reads back (a
  release's plan, a preemptor's nomination, a gang's reservation on its workload);
- :mod:`.templates` and :mod:`.workloads`: Jobs, JobSets, LeaderWorkerSets and PyTorchJobs,
  and the members their pod templates will make;
- :mod:`.declared` and :mod:`.membership`: the ways a gang is declared, one module each
  (each gives a pod's gang key and its gang's shape), and which pods form which gang.
"""
