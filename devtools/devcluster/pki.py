"""PKI, static tokens and kubeconfigs of the local control plane (made with :mod:`certs`).

Files written under ``<run_dir>/pki``::

    ca.crt, ca.key            cluster CA (also signs the controller manager's CSRs)
    apiserver.crt/.key        kube-apiserver serving cert for 127.0.0.1 and localhost
    sa.key, sa.pub            RSA service-account token signing key pair
    tokens.csv                static token file, one identity a line:
                              token,user,uid,"group1,group2"

and ``<run_dir>/kubeconfigs/<identity>.kubeconfig``: token-authenticated, CA embedded.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

import certs


@dataclass(frozen=True)
class Identity:
    """A user of the local cluster, authenticated by a static bearer token.

    ``name`` keys kubeconfigs (``cluster.kubeconfig("alice")``); ``user`` and ``groups`` are
    what kube-apiserver's authenticator reports (``system:authenticated`` is added by the
    API server to every authenticated user anyway).
    """

    name: str
    user: str
    groups: tuple[str, ...] = ()


ADMIN = Identity("admin", "admin", ("system:masters",))
RECONCILER = Identity(
    "reconciler",
    "system:serviceaccount:troupe-system:troupe-reconciler",
    ("system:serviceaccounts", "system:serviceaccounts:troupe-system"),
)
ALICE = Identity("alice", "alice", ("system:authenticated",))

#: Identities every cluster has besides the admin: Troupe's reconciler service account
#: (no RBAC granted: whoever needs it must bind roles) and a plain user.
DEFAULT_IDENTITIES: tuple[Identity, ...] = (RECONCILER, ALICE)


@dataclass(frozen=True)
class Pki:
    """Paths of the PKI files and the bearer token of each identity (keyed by ``name``)."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_private_key: Path
    sa_public_key: Path
    token_file: Path
    tokens: Mapping[str, str]

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate, PEM bytes."""
        return self.ca_cert.read_bytes()


def _check_identities(identities: Iterable[Identity]) -> list[Identity]:
    out = [ADMIN]
    names = {ADMIN.name}
    for identity in identities:
        if identity.name in names:
            raise ValueError(
                f"identity name {identity.name!r} is given twice (or clashes with the admin)"
            )
        for field in (identity.user, *identity.groups):
            if not field or any(ch in field for ch in ',"\n'):
                raise ValueError(
                    f"identity {identity.name!r}: {field!r} is empty or contains a comma, quote or newline"
                )
        names.add(identity.name)
        out.append(identity)
    return out


def token_file_line(token: str, identity: Identity, uid: str) -> str:
    """One line of kube-apiserver's ``--token-auth-file``: ``token,user,uid,"g1,g2"``."""
    line = f"{token},{identity.user},{uid}"
    if identity.groups:
        line += ',"' + ",".join(identity.groups) + '"'
    return line


def write_pki(directory: Path, identities: Iterable[Identity] = DEFAULT_IDENTITIES) -> Pki:
    """Create the CA, serving cert, SA key pair and token file under ``directory``.

    The admin identity (group ``system:masters``) is always included first. Raises
    ``ValueError`` on duplicate identity names or user/group strings the token file
    format cannot carry (commas, quotes, newlines).
    """
    everyone = _check_identities(identities)
    directory.mkdir(parents=True, exist_ok=True)
    ca = certs.create_ca("troupe-devcluster-ca", days=30)
    serving = certs.create_serving_cert(
        ca, sans=["127.0.0.1", "localhost"], common_name="kube-apiserver"
    )
    sa_private, sa_public = certs.create_rsa_key_pair()
    pki = Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        sa_private_key=directory / "sa.key",
        sa_public_key=directory / "sa.pub",
        token_file=directory / "tokens.csv",
        tokens={identity.name: secrets.token_hex(24) for identity in everyone},
    )
    certs.write_pair(ca, pki.ca_cert, pki.ca_key)
    certs.write_pair(serving, pki.serving_cert, pki.serving_key)
    certs.write_private(pki.sa_private_key, sa_private)
    pki.sa_public_key.write_bytes(sa_public)
    lines = [
        token_file_line(pki.tokens[identity.name], identity, f"troupe-devcluster-{identity.name}")
        for identity in everyone
    ]
    certs.write_private(pki.token_file, ("\n".join(lines) + "\n").encode())
    return pki


def kubeconfig_dict(server: str, ca_pem: bytes, user: str, token: str) -> dict[str, object]:
    """A kubeconfig (as a dict) with one cluster ``troupe-dev``, one user, one context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "troupe-dev",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": f"{user}@troupe-dev", "context": {"cluster": "troupe-dev", "user": user}}
        ],
        "current-context": f"{user}@troupe-dev",
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, user: str, token: str) -> Path:
    """Write a token kubeconfig (mode 0600, it holds a credential) and return its path."""
    text = yaml.safe_dump(kubeconfig_dict(server, ca_pem, user, token), sort_keys=False)
    return certs.write_private(path, text.encode())
