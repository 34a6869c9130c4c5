"""``python -m certs``: create a CA and serving certificates, report expiry.

Examples::

    python -m certs ca --out pki/                       # pki/ca.crt, pki/ca.key
    python -m certs serving --ca-dir pki/ --san 127.0.0.1 --san localhost --out pki/webhook
    python -m certs expiry pki/ca.crt pki/webhook.crt    # prints not-after and days left

Exit codes: 0 on success; 1 when ``expiry --within`` finds a certificate to rotate;
2 on bad input, with a one-line error naming the file or flag.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path
from typing import NoReturn

from cryptography.hazmat.primitives import serialization

import certs


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (``--help`` still prints the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m certs",
        description="Create a CA and TLS serving certificates for Troupe's webhook, and report expiry. "
        "Keys are written with mode 0600.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    ca = sub.add_parser("ca", help="create a self-signed CA: OUT/ca.crt and OUT/ca.key")
    ca.add_argument("--out", required=True, type=Path, help="directory to write ca.crt and ca.key into")
    ca.add_argument("--common-name", default="troupe-ca", help="subject CN of the CA (default %(default)s)")
    ca.add_argument("--days", type=int, default=certs.pki.CA_DAYS, help="validity in days (default %(default)s)")
    ca.add_argument("--force", action="store_true", help="overwrite an existing CA")

    sv = sub.add_parser("serving", help="create a serving certificate signed by a CA: OUT.crt and OUT.key")
    sv.add_argument("--ca-dir", required=True, type=Path, help="directory holding ca.crt and ca.key")
    sv.add_argument("--san", action="append", required=True,
                    help="subject alternative name, a DNS name or an IP; repeat for several")
    sv.add_argument("--out", required=True, type=Path, help="path prefix: writes OUT.crt and OUT.key")
    sv.add_argument("--days", type=int, default=certs.pki.LEAF_DAYS, help="validity in days (default %(default)s)")

    ex = sub.add_parser("expiry", help="print each certificate's expiry and days left")
    ex.add_argument("files", nargs="+", type=Path, help="PEM certificate files")
    ex.add_argument("--within", type=float, metavar="DAYS",
                    help="exit 1 if any certificate expires within DAYS days (rotation due)")
    return p


def _fail(message: str) -> int:
    print(f"certs: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (see the module docstring). A closed stdout
    (``| head``) ends it with 141 and nothing on stderr."""
    args = _parser().parse_args(argv)
    try:
        code = _run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _pem(path: Path, what: str) -> bytes:
    """The bytes of ``path`` when they hold a PEM ``what`` (``CERTIFICATE``, ``PRIVATE KEY``);
    raises ``ValueError`` naming the file otherwise."""
    data = path.read_bytes()
    if b"-----BEGIN " not in data or what.encode() not in data:
        raise ValueError(f"{path}: not a PEM {what.lower()}")
    return data


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "ca":
            crt, key = args.out / "ca.crt", args.out / "ca.key"
            if crt.exists() and not args.force:
                return _fail(f"{crt} exists; pass --force to replace the CA (every certificate it signed stops verifying)")
            certs.write_pair(certs.create_ca(args.common_name, args.days), crt, key)
            print(f"wrote {crt} and {key}")
        elif args.command == "serving":
            ca_crt, ca_key = args.ca_dir / "ca.crt", args.ca_dir / "ca.key"
            for f in (ca_crt, ca_key):
                if not f.is_file():
                    return _fail(f"--ca-dir: {f} not found (create it with 'python -m certs ca --out {args.ca_dir}')")
            ca = certs.KeyPair(_pem(ca_crt, "CERTIFICATE"), _pem(ca_key, "PRIVATE KEY"))
            for san in args.san:
                certs.san_name(san)  # a bad name fails here, by flag
            try:
                certs.load_cert(ca_crt)
            except ValueError:
                return _fail(f"{ca_crt}: not a PEM certificate")
            try:
                serialization.load_pem_private_key(ca.key_pem, password=None)
            except (ValueError, TypeError):
                return _fail(f"{ca_key}: not a PEM private key without a password")
            pair = certs.create_serving_cert(ca, args.san, days=args.days)
            crt, key = Path(f"{args.out}.crt"), Path(f"{args.out}.key")
            certs.write_pair(pair, crt, key)
            print(f"wrote {crt} and {key} (SANs: {', '.join(args.san)})")
        else:
            now = dt.datetime.now(dt.UTC)
            due = False
            for f in args.files:
                try:
                    end = certs.expiry(f)
                except FileNotFoundError:
                    return _fail(f"{f}: no such file")
                except ValueError:
                    return _fail(f"{f}: not a PEM certificate")
                days = (end - now).total_seconds() / 86400
                due |= args.within is not None and days <= args.within
                print(f"{f}\t{end.isoformat()}\t{days:.1f} days left")
            return 1 if due else 0
    except ValueError as e:
        return _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
    except BrokenPipeError:
        raise
    except OSError as e:  # a directory or file that cannot be made or read
        return _fail(f"{e.filename or ''}: {e.strerror}" if e.strerror else str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
