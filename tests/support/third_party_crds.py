"""CustomResourceDefinitions of the third-party kinds the chart can render (cert-manager's
Issuer and Certificate, prometheus-operator's ServiceMonitor), for a local API server that
has neither project installed.

The schemas come from the ``cloudcoil-models-*`` packages, Python models generated from the
projects' own CRDs: their JSON schema is turned back into a structural OpenAPI schema
(references inlined, ``Optional`` unwrapped, int-or-string marked), so that a server-side
dry run with strict field validation refuses a field name either project does not have.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def _structural(node: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    if depth > 40:  # a recursive type: accept what is below
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if "$ref" in node:
        return _structural(defs[node["$ref"].rsplit("/", 1)[1]], defs, depth + 1)
    options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
    if options:
        types = {o.get("type") for o in options}
        if types == {"integer", "string"}:
            return {"x-kubernetes-int-or-string": True}
        if len(options) == 1:
            return _structural(options[0], defs, depth + 1)
        return {"x-kubernetes-preserve-unknown-fields": True}
    kind = node.get("type")
    out: dict[str, Any] = {}
    if kind == "object" or "properties" in node:
        out["type"] = "object"
        if "properties" in node:
            out["properties"] = {k: _structural(v, defs, depth + 1) for k, v in node["properties"].items()}
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            out["additionalProperties"] = _structural(extra, defs, depth + 1)
        elif "properties" not in node:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        out = {"type": "array", "items": _structural(node.get("items") or {}, defs, depth + 1)}
    elif kind in ("string", "integer", "number", "boolean"):
        out["type"] = kind
        if "enum" in node:
            out["enum"] = [v for v in node["enum"] if v is not None]
    else:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def crd(model: type[BaseModel], group: str, plural: str, scope: str = "Namespaced") -> dict[str, Any]:
    """A v1 CRD (version ``v1``) for ``model``, whose schema is the model's ``spec``."""
    schema = model.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    spec = _structural(schema["properties"]["spec"], defs)
    kind = model.__name__
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": scope,
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": spec, "status": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
    }


def third_party_crds() -> list[dict[str, Any]]:
    """cert-manager's Issuer and Certificate, prometheus-operator's ServiceMonitor."""
    from cloudcoil.models.cert_manager.v1 import Certificate, Issuer
    from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor

    return [crd(Issuer, "cert-manager.io", "issuers"), crd(Certificate, "cert-manager.io", "certificates"),
            crd(ServiceMonitor, "monitoring.coreos.com", "servicemonitors")]
