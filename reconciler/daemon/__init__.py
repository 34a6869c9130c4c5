"""The reconciler daemon's controllers and what they keep: the cache the informers feed, a
work queue of gangs, the gang controller and its handlers (one class per concern), the
SharedDeviceGroup controller, the condition sink, the taints, the Gang objects, leader
election, certificates, metrics. They write through the ports of :mod:`reconciler.ports`
(one per kind of object, with their in-memory fakes), which :mod:`reconciler.kube`
implements against the API server; :mod:`reconciler.run` wires them together."""
