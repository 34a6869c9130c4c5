"""The reconciler daemon: informers feed the cache, a work queue of gangs, the gang
controller and its handlers (one class per concern), the SharedDeviceGroup controller, the
writer ports (one per kind of object, with their in-memory fakes), leader election,
certificates, metrics. :mod:`reconciler.run` wires them together."""
