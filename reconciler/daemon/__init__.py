"""The reconciler daemon: informers feed the cache, a work queue of gangs, the gang and
SharedDeviceGroup controllers, the writer port, leader election, certificates, metrics,
and ``run``, which wires them together."""
