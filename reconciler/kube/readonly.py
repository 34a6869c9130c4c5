"""The read-only client of ``kubectl troupe``: the caller's kubeconfig, the cluster listed
once (:func:`read_cluster`), the pods and nodes ``topology --web`` watches
(:func:`watched_resources`), and the reconciler's configuration read from its ConfigMap."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from reconciler.engine.ledger.parts import POD_GROUP
from reconciler.engine.model import workloads as wl
from reconciler.kube.client import REQUEST_TIMEOUT, Page, error_message, list_pages, load_kubeconfig
from reconciler.kube.informer import Resource
from reconciler.objects import snapshot_io
from troupe import contract
from troupe.podgroups import GROUP_APIS

#: The pods that use nothing and count for nothing are not listed: a gang's members are its
#: active pods, and a finished pod frees its node (a field selector the API server serves).
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"

Objects = list[Mapping[str, Any]]
#: How one collection is listed: ``lister(list_fn, what, **kwargs)`` (:func:`_list_all` or
#: :func:`_list_if_allowed`).
Lister = Callable[..., Objects]


def _where_kubeconfig(kubeconfig: str | None) -> str:
    """Where a kubeconfig was looked for, for the message that none was found: ``--kubeconfig``,
    else ``$KUBECONFIG``'s files and ``~/.kube/config``, as kubectl looks."""
    if kubeconfig:
        return f"--kubeconfig {kubeconfig}"
    env = os.environ.get("KUBECONFIG", "")
    default = os.path.expanduser("~/.kube/config")
    return f"$KUBECONFIG ({env})" if env else f"$KUBECONFIG (unset) and {default}"


def _kubeconfig_missing(kubeconfig: str | None) -> bool:
    """Whether no file of the kubeconfig's search path exists."""
    if kubeconfig:
        return not os.path.isfile(kubeconfig)
    env = os.environ.get("KUBECONFIG", "")
    paths = [p for p in env.split(os.pathsep) if p] if env else [os.path.expanduser("~/.kube/config")]
    return not any(os.path.isfile(p) for p in paths)


@dataclass(frozen=True)
class Overrides:
    """kubectl's kubeconfig overrides (k8s.io/cli-runtime ``genericclioptions.ConfigFlags``):
    ``server`` (``--server``: the API server's URL, instead of the context's cluster's),
    ``token`` (``--token``: a bearer token, instead of the context's user's credentials),
    ``as_user``/``as_groups`` (``--as``/``--as-group``: the ``Impersonate-User`` and
    ``Impersonate-Group`` headers of Kubernetes' user impersonation, "Authenticating:
    User impersonation" in the Kubernetes docs), ``certificate_authority`` (a CA file) and
    ``insecure`` (``--insecure-skip-tls-verify``)."""

    server: str | None = None
    token: str | None = None
    as_user: str | None = None
    as_groups: tuple[str, ...] = ()
    certificate_authority: str | None = None
    insecure: bool = False

    def check(self) -> None:
        """Raise ``ValueError`` naming the flags for what kubectl refuses too."""
        if self.as_groups and not self.as_user:
            raise ValueError("--as-group: needs --as USER (the API server impersonates groups only with a user)")
        if self.insecure and self.certificate_authority:
            raise ValueError("--insecure-skip-tls-verify with --certificate-authority: give one of them")
        if self.certificate_authority and not os.path.isfile(self.certificate_authority):
            raise ValueError(f"--certificate-authority {self.certificate_authority}: no such file")

    def apply(self, cfg: client.Configuration) -> None:
        """Set the server, the credentials and the TLS checks of ``cfg``."""
        if self.server:
            cfg.host = self.server.rstrip("/")
        if self.token:
            cfg.api_key = {"authorization": f"Bearer {self.token}"}
            cfg.api_key_prefix = {}
            cfg.refresh_api_key_hook = None  # an exec plugin or OIDC refresher would write its own token back
        if self.certificate_authority:
            cfg.ssl_ca_cert = self.certificate_authority
            cfg.verify_ssl = True
        if self.insecure:
            cfg.verify_ssl = False
            cfg.ssl_ca_cert = None

    def impersonate(self, api: client.ApiClient) -> None:
        """Send the impersonation headers with every request of ``api``. The client sends
        one value per header, so several groups are added to each request as separate
        ``Impersonate-Group`` headers (as kubectl sends them) below it, in urllib3's pool."""
        if self.as_user:
            api.default_headers["Impersonate-User"] = self.as_user
        if len(self.as_groups) == 1:
            api.default_headers["Impersonate-Group"] = self.as_groups[0]
        elif self.as_groups:
            pool = api.rest_client.pool_manager
            send, groups = pool.request, self.as_groups

            def request(method: str, url: str, **kwargs: Any) -> Any:
                merged = urllib3.HTTPHeaderDict(kwargs.pop("headers", None) or {})
                for group in groups:
                    merged.add("Impersonate-Group", group)
                return send(method, url, headers=merged, **kwargs)

            pool.request = request  # type: ignore[method-assign,assignment]  # where every request goes


def plugin_client(kubeconfig: str | None, context: str | None,
                  overrides: Overrides | None = None) -> tuple[client.ApiClient, str]:
    """A read-only caller's API client and its default namespace, from ``kubeconfig``
    (default: ``$KUBECONFIG``, else ``~/.kube/config``, as kubectl) and ``context``
    (default: the current one), with kubectl's ``overrides``: the context's namespace, else
    ``default``. With ``overrides.server`` no kubeconfig is needed (kubectl's
    ``--server URL --token T``). Raises ``ValueError`` naming the file, context or flag when
    neither works, and where it looked when there is no kubeconfig at all."""
    overrides = overrides or Overrides()
    overrides.check()
    chosen: Mapping[str, Any] | None = None
    if _kubeconfig_missing(kubeconfig):
        if not overrides.server or kubeconfig:
            raise ValueError(f"no kubeconfig: looked in {_where_kubeconfig(kubeconfig)}; give --kubeconfig FILE, "
                             "--server URL, or --snapshot FILE to read a snapshot instead")
        cfg = client.Configuration()
    else:
        try:
            contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]  # unannotated
                config_file=kubeconfig)
            chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
            if chosen is None:
                raise ValueError(f"--context: no context {context!r} in the kubeconfig "
                                 f"(known: {', '.join(sorted(str(c.get('name')) for c in contexts))})")
            cfg = client.Configuration()
            load_kubeconfig(kubeconfig, cfg, context)
        except config.ConfigException as e:
            raise ValueError(f"kubeconfig {kubeconfig or '(default)'}: {e}") from e
    overrides.apply(cfg)
    cfg.retries = urllib3.Retry(total=2, read=0, redirect=0, status=0)  # a command line fails fast
    api = client.ApiClient(cfg)
    api.user_agent = "kubectl-troupe"
    overrides.impersonate(api)
    namespace = str(((chosen or {}).get("context") or {}).get("namespace") or "default")
    return api, namespace


def unreachable(what: str, error: urllib3.exceptions.HTTPError) -> OSError:
    """One line for a request that got no answer: ``list pods: cannot reach the API server
    https://HOST:PORT: Connection refused`` (the pool's address and the last cause, without
    urllib3's retry narrative)."""
    pool = getattr(error, "pool", None)
    url = f"{pool.scheme}://{pool.host}:{pool.port}" if pool is not None else "(unknown)"
    cause = getattr(error, "reason", None) or error
    text = re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(cause))
    detail = text.rsplit("] ", 1)[-1].rsplit(": ", 1)[-1].strip(" )\"'") or type(cause).__name__
    if isinstance(cause, urllib3.exceptions.TimeoutError) and not isinstance(
            cause, urllib3.exceptions.NewConnectionError):  # urllib3 makes a refused connection a timeout too
        detail = "timed out (see --request-timeout)"
    return OSError(f"{what}: cannot reach the API server {url}: {detail}")


def _retained_page(data: bytes) -> Page:
    """A page of a list, each object cut to what the cache keeps of it and read fast
    (:func:`reconciler.objects.snapshot_io.decode_retained`), else read whole."""
    page = snapshot_io.decode_retained(data)
    if page is None:
        body = orjson.loads(data)
        page = (body.get("items") or [], body.get("metadata") or {})
    return page


def _list_all(list_fn: Callable[..., Any], what: str, **kwargs: Any) -> Objects:
    """Every object of a list, page by page (:func:`~reconciler.kube.client.list_pages`),
    from the API server's watch cache (``resourceVersion=0``: no quorum read of etcd).
    Raises ``OSError`` naming ``what`` on an API error (``PermissionError`` for 401/403)."""
    items: Objects = []
    try:
        for page_items, _meta in list_pages(list_fn, _retained_page, start_version="0", **kwargs):
            items.extend(page_items)
    except ApiException as e:
        error = PermissionError if e.status in (401, 403) else OSError
        raise error(f"list {what}: {e.status} {error_message(e)}") from e
    except urllib3.exceptions.HTTPError as e:
        raise unreachable(f"list {what}", e) from e
    return items


def _list_if_allowed(list_fn: Callable[..., Any], what: str, **kwargs: Any) -> Objects:
    """As :func:`_list_all`, but none when the collection is not served (a custom resource
    whose CRD is not installed: 404) or this user may not list it (403)."""
    try:
        return _list_all(list_fn, what, **kwargs)
    except OSError as e:
        cause = e.__cause__
        if isinstance(cause, ApiException) and cause.status in (403, 404):
            return []
        raise


class _Unlisted(list[Mapping[str, Any]]):
    """No objects, because the collection could not be listed: ``why`` says why."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why


def _list_noted(list_fn: Callable[..., Any], what: str, **kwargs: Any) -> Objects:
    """As :func:`_list_all`, but an :class:`_Unlisted` (empty) when this user may not list
    the collection (401, 403) or it is not served (404)."""
    try:
        return _list_all(list_fn, what, **kwargs)
    except OSError as e:
        cause = e.__cause__
        if isinstance(cause, ApiException) and cause.status in (401, 403, 404):
            return _Unlisted(str(e))
        raise


#: What is skipped when a kind :func:`_list_noted` lists cannot be listed.
_SKIPPED = {"Namespace": "a namespaceSelector sees every namespace without labels",
            "PersistentVolumeClaim": "the volume filters are skipped", "PersistentVolume": "the volume filters are skipped",
            "CSINode": "the volume filters are skipped"}


def _without_unlisted(lists: list[tuple[str, str, Callable[..., Any], dict[str, Any], Lister]],
                      results: list[Objects], notes: list[str]) -> list[Objects]:
    """``results`` with one line in ``notes`` per kind that could not be listed and, when a
    volume kind could not be, no claims, volumes or CSINodes at all (the engine then skips
    the volume filters: :func:`reconciler.engine.ledger.parts.read_parts`)."""
    volumes = ("PersistentVolumeClaim", "PersistentVolume", "CSINode")
    unlisted = {entry[0] for entry, items in zip(lists, results, strict=True) if isinstance(items, _Unlisted)}
    for entry, items in zip(lists, results, strict=True):
        if isinstance(items, _Unlisted):
            notes.append(f"note: cannot {items.why}: {_SKIPPED[entry[0]]}")
    if unlisted & set(volumes):
        return [[] if entry[0] in volumes else items for entry, items in zip(lists, results, strict=True)]
    return results


#: The ``apps/v1`` owners read, with the client's name of them.
APPS_OWNERS = (("ReplicaSet", "replica_set"), ("StatefulSet", "stateful_set"), ("DaemonSet", "daemon_set"))


def _apps_owner_lists(apps: client.AppsV1Api) -> list[tuple[str, str, Callable[..., Any], dict[str, Any], Lister]]:
    """The lists of the ``apps/v1`` owners Volcano reads its groups' minimum from
    (docs/decisions/065-adopted-pods-join-their-peers-groups.md): none when this user may not list them."""
    return [(kind, f"{kind.lower()}s", getattr(apps, f"list_{plural}_for_all_namespaces"), {}, _list_if_allowed)
            for kind, plural in APPS_OWNERS]
#: The DRA kinds read, with their resource names (``resource.k8s.io/v1``).
DRA_RESOURCES = (("ResourceSlice", "resourceslices"), ("DeviceClass", "deviceclasses"),
                 ("ResourceClaim", "resourceclaims"), ("ResourceClaimTemplate", "resourceclaimtemplates"))


def read_cluster(api: client.ApiClient, extra: tuple[str, ...] = (), notes: list[str] | None = None,
                 timeout: float | None = None, leave_out: frozenset[str] = frozenset()
                 ) -> list[tuple[str, str, Mapping[str, Any]]]:
    """The objects a decision reads, listed once, read-only: Nodes, active Pods, Jobs,
    SharedDeviceGroups, PodDisruptionBudgets, the apps owners (:func:`_apps_owner_lists`), the DRA kinds (ResourceSlices, DeviceClasses,
    ResourceClaims, ResourceClaimTemplates), pod groups (:func:`_one_version_each`), the
    workload kinds of :mod:`reconciler.engine.model.workloads` (a custom resource whose CRD is not installed, or that this user may not list, is left
    out: its gangs wait with that reason), what the reconciler's cache reads for the
    volume filters and namespace selectors (Namespaces, PersistentVolumeClaims,
    PersistentVolumes, CSINodes: one this user may not list is left out with a line in
    ``notes``, and when one of the last three is, all three are, so the volume filters are
    skipped rather than refusing every pod with a claim), and ``extra`` kinds
    (``PriorityClass``, ``Gang``), but not the kinds named in ``leave_out`` (``Pod``, ``Node``:
    what a caller watches instead, :func:`watched_resources`). ``timeout``: seconds for each request (``--request-timeout``; None:
    :data:`~reconciler.kube.client.REQUEST_TIMEOUT`). Lists run in parallel. Returns ``(where, kind, object)`` triples
    in the order :func:`reconciler.tools.simulate.build` takes. Raises ``OSError`` (a
    ``PermissionError`` for a core list this user may not make)."""
    core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)

    def crd(group: str, version: str, plural: str) -> Callable[..., Any]:
        return functools.partial(custom.list_cluster_custom_object, group, version, plural)

    lists: list[tuple[str, str, Callable[..., Any], dict[str, Any], Lister]] = [
        ("Pod", "pods", core.list_pod_for_all_namespaces, {"field_selector": ACTIVE_PODS}, _list_all),
        ("Node", "nodes", core.list_node, {}, _list_all),
        ("Job", "jobs", batch.list_job_for_all_namespaces, {}, _list_all),
        *[(k.kind, k.crd, crd(k.group, k.version, k.plural), {}, _list_if_allowed) for k in wl.CUSTOM_KINDS],
        *_apps_owner_lists(client.AppsV1Api(api)),
        ("SharedDeviceGroup", "shareddevicegroups", crd(*contract.DEVICE_GROUP_API), {}, _list_if_allowed),
        *[(kind, plural, crd("resource.k8s.io", "v1", plural), {}, _list_if_allowed)
          for kind, plural in DRA_RESOURCES],  # DRA (docs/decisions/044-dra.md); absent before 1.34
        ("PodDisruptionBudget", "poddisruptionbudgets",
         client.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces, {}, _list_if_allowed),
        *_pod_group_lists(crd),
        ("Namespace", "namespaces", core.list_namespace, {}, _list_noted),
        ("PersistentVolumeClaim", "persistentvolumeclaims", core.list_persistent_volume_claim_for_all_namespaces, {},
         _list_noted),
        ("PersistentVolume", "persistentvolumes", core.list_persistent_volume, {}, _list_noted),
        ("CSINode", "csinodes", client.StorageV1Api(api).list_csi_node, {}, _list_noted),
    ]
    if "Gang" in extra:  # what the reconciler recorded of each gang (docs/decisions/043-gang-objects.md)
        lists.append(("Gang", "gangs", crd(*contract.GANG_API), {}, _list_if_allowed))
    if "PriorityClass" in extra:
        lists.append(("PriorityClass", "priorityclasses",
                      client.SchedulingV1Api(api).list_priority_class, {}, _list_if_allowed))

    lists = [entry for entry in lists if entry[0] not in leave_out]

    def one(entry: tuple[str, str, Callable[..., Any], dict[str, Any], Lister]) -> Objects:
        _, what, fn, kwargs, lister = entry
        return lister(fn, what, **kwargs, **({"_request_timeout": timeout} if timeout else {}))

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, lists))
    results = _one_version_each(lists, _without_unlisted(lists, results, notes if notes is not None else []))
    order = {"Node": 0, "Pod": 2, "SharedDeviceGroup": 3}
    out: list[tuple[str, str, Mapping[str, Any]]] = []
    for (kind, what, *_), items in sorted(zip(lists, results, strict=True), key=lambda t: order.get(t[0][0], 1)):
        out += [(f"{what} item {i}", kind, obj) for i, obj in enumerate(items)]
    return out


def _pod_group_lists(crd: Callable[[str, str, str], Callable[..., Any]]
                     ) -> list[tuple[str, str, Callable[..., Any], dict[str, Any], Lister]]:
    """The lists of the pod groups, one per API version, each read where served
    (docs/decisions/056-pod-groups.md)."""
    return [(POD_GROUP, f"{a.plural}.{v}.{a.group}", crd(a.group, v, a.plural), {}, _list_if_allowed)
            for a in GROUP_APIS for v in a.versions]


def _one_version_each(lists: list[tuple[str, str, Callable[..., Any], dict[str, Any], Lister]],
                      results: list[Objects]) -> list[Objects]:
    """``results`` with each pod group once: an API server that serves two versions of one
    API (an upgrade) lists the same object at both; the first, the preferred, is kept. Each
    carries its ``apiVersion`` (a list of a built-in API leaves it out of its items), which
    says whose group it is."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for entry, items in zip(lists, results, strict=True):
        if entry[0] == POD_GROUP:
            _, version, group = entry[1].split(".", 2)
            kept: Objects = []
            for obj in items:
                meta = obj.get("metadata") or {}
                key = (group, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
                if key not in seen:
                    seen.add(key)
                    kept.append(obj if obj.get("apiVersion") else {**obj, "apiVersion": f"{group}/{version}"})
            items = kept
        out.append(items)
    return out


def watched_resources(api: client.ApiClient) -> dict[str, Resource]:
    """Kind -> the collection an :class:`~reconciler.kube.informer.Informer` lists and
    watches for ``kubectl troupe topology --web`` on a live cluster: ``Pod`` (the active
    pods, :data:`ACTIVE_PODS`, as :func:`read_cluster` lists them: a pod that finishes
    leaves the watch as ``DELETED``) and ``Node``."""
    core = client.CoreV1Api(api)
    return {"Pod": Resource("pods", functools.partial(core.list_pod_for_all_namespaces, field_selector=ACTIVE_PODS)),
            "Node": Resource("nodes", core.list_node)}


def read_config_map(api: client.ApiClient, namespace: str, name: str, key: str,
                    timeout: float | None = None) -> str | None:
    """``data[key]`` of ConfigMap ``namespace/name``, or None when it, or the key, does not
    exist or this user may not read it; ``timeout``: seconds for the request (None:
    :data:`~reconciler.kube.client.REQUEST_TIMEOUT`). Raises ``OSError`` for other failures."""
    try:
        resp: Any = client.CoreV1Api(api).read_namespaced_config_map(name, namespace, _preload_content=False,
                                                                     _request_timeout=timeout or REQUEST_TIMEOUT)
    except ApiException as e:
        if e.status in (401, 403, 404):
            return None
        raise OSError(f"read ConfigMap {namespace}/{name}: {e.status} {error_message(e)}") from e
    except urllib3.exceptions.HTTPError as e:
        raise unreachable(f"read ConfigMap {namespace}/{name}", e) from e
    value = (orjson.loads(resp.data).get("data") or {}).get(key)
    return value if isinstance(value, str) else None
