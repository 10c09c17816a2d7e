"""The webhook TLS Secret's content: when it is made or renewed, what a renewal keeps, the files Kopf
reads."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from cryptography import x509

from phalanx import certs
from phalanx.controller.process.webhook_tls import (
    CERT_VALIDITY,
    WebhookCerts,
    read_files,
    renew,
    renewal_reason,
    write_files,
)

HOSTS = [
    "phalanx",
    "phalanx.phalanx-system",
    "phalanx.phalanx-system.svc",
    "phalanx.phalanx-system.svc.cluster.local",
]
NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def made(
    *,
    ca_age: dt.timedelta = dt.timedelta(0),
    ca_validity: dt.timedelta = dt.timedelta(days=3650),
    cert_age: dt.timedelta = dt.timedelta(0),
    cert_validity: dt.timedelta = CERT_VALIDITY,
    hosts: list[str] | None = None,
) -> WebhookCerts:
    ca = certs.make_ca("test-ca", validity=ca_validity, now=NOW - ca_age)
    leaf = certs.issue(ca, "test", hosts or HOSTS, validity=cert_validity, now=NOW - cert_age)
    return WebhookCerts(ca_bundle=ca.cert_pem, ca_key=ca.key_pem, cert=leaf.cert_pem, key=leaf.key_pem)


def cas(bundle: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle)


def leaf(content: WebhookCerts) -> x509.Certificate:
    return x509.load_pem_x509_certificate(content.cert)


def test_sound_content_is_kept() -> None:
    assert renewal_reason(made(), HOSTS, NOW) is None
    # Two thirds of the certificate's lifetime gone is still fine; a third left is the limit.
    assert renewal_reason(made(cert_age=dt.timedelta(days=240)), HOSTS, NOW) is None


def test_what_makes_a_renewal_due() -> None:
    assert renewal_reason(None, HOSTS, NOW) == "no certificate yet"
    expiring = renewal_reason(made(cert_age=dt.timedelta(days=250)), HOSTS, NOW)
    assert expiring is not None and expiring.startswith("the certificate expires at")
    ca_expiring = renewal_reason(made(ca_age=dt.timedelta(days=2500)), HOSTS, NOW)
    assert ca_expiring is not None and ca_expiring.startswith("the CA expires at")
    other_service = renewal_reason(made(hosts=["other.phalanx-system.svc"]), HOSTS, NOW)
    assert other_service == f"the certificate does not cover {', '.join(HOSTS)}"
    one, two = made(), made()
    foreign = WebhookCerts(one.ca_bundle, one.ca_key, two.cert, two.key)
    reason = renewal_reason(foreign, HOSTS, NOW)
    assert reason is not None and reason.startswith("the certificate was not issued by the current CA")
    assert renewal_reason(WebhookCerts(one.ca_bundle, one.ca_key, one.cert, two.key), HOSTS, NOW) == (
        "the key does not match the certificate"
    )
    assert renewal_reason(WebhookCerts(one.ca_bundle, two.ca_key, one.cert, one.key), HOSTS, NOW) == (
        "the CA key does not match the CA"
    )
    garbage = renewal_reason(WebhookCerts(b"not pem", one.ca_key, one.cert, one.key), HOSTS, NOW)
    assert garbage is not None and garbage.startswith("unreadable")


def test_a_certificate_renewal_keeps_the_ca_so_the_ca_bundle_does_not_change() -> None:
    old = made(cert_age=dt.timedelta(days=300))
    new = renew(old, HOSTS, NOW)
    assert new.ca_bundle == old.ca_bundle and new.ca_key == old.ca_key
    assert leaf(new).serial_number != leaf(old).serial_number
    assert leaf(new).not_valid_after_utc == NOW + CERT_VALIDITY
    assert renewal_reason(new, HOSTS, NOW) is None
    leaf(new).verify_directly_issued_by(cas(new.ca_bundle)[0])


def test_a_ca_renewal_keeps_the_old_ca_in_the_bundle_while_it_is_valid() -> None:
    old = made(ca_age=dt.timedelta(days=3000))
    new = renew(old, HOSTS, NOW)
    bundle = cas(new.ca_bundle)
    assert len(bundle) == 2 and bundle[1] == cas(old.ca_bundle)[0], "new CA first, then the old one"
    leaf(new).verify_directly_issued_by(bundle[0])
    assert renewal_reason(new, HOSTS, NOW) is None
    # Once the old CA has expired it leaves the bundle at the next renewal.
    later = NOW + dt.timedelta(days=3650 - 3000 + 1)
    assert cas(renew(new, HOSTS, later).ca_bundle) == [bundle[0]]


def test_the_first_content_is_a_new_ca_and_certificate() -> None:
    first = renew(None, HOSTS, NOW)
    assert len(cas(first.ca_bundle)) == 1
    assert renewal_reason(first, HOSTS, NOW) is None
    assert WebhookCerts.from_secret_data(first.secret_data()) == first
    assert WebhookCerts.from_secret_data({"tls.crt": "eA=="}) is None
    assert WebhookCerts.from_secret_data({**first.secret_data(), "tls.key": "not base64!"}) is None


def test_files_are_swapped_all_at_once_through_symlinks(tmp_path: Path) -> None:
    folder = tmp_path / "certs"
    first, second = made(), made()
    assert write_files(folder, first.served_files())
    assert read_files(folder) == first.served_files()
    assert not write_files(folder, first.served_files()), "unchanged content is not written again"
    for name in ("ca.crt", "tls.crt", "tls.key"):
        assert os.readlink(folder / name) == f"..data/{name}"
    version = os.readlink(folder / "..data")
    assert write_files(folder, second.served_files())
    assert read_files(folder) == second.served_files()
    assert os.readlink(folder / "..data") != version
    assert not (folder / version).exists(), "the old version is removed"
    assert (folder / os.readlink(folder / "..data") / "tls.key").stat().st_mode & 0o777 == 0o600


def test_plain_files_from_an_earlier_start_are_replaced(tmp_path: Path) -> None:
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_bytes(b"old")
    content = made()
    assert write_files(tmp_path, content.served_files())
    assert read_files(tmp_path) == content.served_files()
