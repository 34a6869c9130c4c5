"""In-memory fakes of the writer ports, for tests and benchmarks without an API server: one
per port, each in its own module with the API server's rules for its kind
(:class:`~reconciler.ports.fake.pods.FakePodWrites`,
:class:`~reconciler.ports.fake.nodes.FakeNodeWrites`,
:class:`~reconciler.ports.fake.workloads.FakeWorkloadWrites`,
:class:`~reconciler.ports.fake.gangobjects.FakeGangObjectWrites`,
:class:`~reconciler.ports.fake.devicegroups.FakeDeviceGroupWrites`,
:class:`~reconciler.ports.fake.state.FakeStateStore`,
:class:`~reconciler.ports.fake.capacity.FakeCapacityWrites`), and :class:`FakeCluster`, the
seven over one resourceVersion counter, one list of Events and one fence."""

from __future__ import annotations

from reconciler import ports
from reconciler.ports.base import UNFENCED, Fence
from reconciler.ports.fake.base import RecordedEvent, Versions
from reconciler.ports.fake.capacity import FakeCapacityWrites
from reconciler.ports.fake.devicegroups import FakeDeviceGroupWrites
from reconciler.ports.fake.gangobjects import FakeGangObjectWrites
from reconciler.ports.fake.nodes import FakeNodeWrites
from reconciler.ports.fake.pods import FakePodWrites
from reconciler.ports.fake.state import FakeStateStore
from reconciler.ports.fake.workloads import FakeWorkloadWrites

__all__ = [
    "FakeCapacityWrites",
    "FakeCluster",
    "FakeDeviceGroupWrites",
    "FakeGangObjectWrites",
    "FakeNodeWrites",
    "FakePodWrites",
    "FakeStateStore",
    "FakeWorkloadWrites",
    "RecordedEvent",
    "Versions",
]


class FakeCluster:
    """The seven fakes side by side (a :class:`~reconciler.ports.Writes`, typed as its
    ports; each is the fake of its module): every object they make gets its resourceVersion
    from one counter, as from one etcd; every Event any of them records goes to ``events``,
    in order; each passes ``fence``."""

    def __init__(self, fence: Fence = UNFENCED) -> None:
        self.fence = fence
        self.events: list[RecordedEvent] = []
        versions = Versions()
        pods = FakePodWrites(fence=fence, versions=versions, events=self.events)
        self.pods: ports.PodWrites = pods
        self.nodes: ports.NodeWrites = FakeNodeWrites(fence=fence, versions=versions, events=self.events)
        self.workloads: ports.WorkloadWrites = FakeWorkloadWrites(fence=fence, versions=versions, events=self.events)
        self.gang_objects: ports.GangObjectWrites = FakeGangObjectWrites(fence=fence, versions=versions)
        self.groups: ports.DeviceGroupWrites = FakeDeviceGroupWrites(fence=fence, versions=versions)
        self.state: ports.StateStore = FakeStateStore(fence=fence)
        # Its members' specs are read from the pods' fake, as from one API server.
        self.capacity: ports.CapacityWrites = FakeCapacityWrites(fence=fence, versions=versions, events=self.events,
                                                                 pods=pods.objects)

    def close(self) -> None:
        """Nothing is queued: nothing to send."""
