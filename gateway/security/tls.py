"""TLS for the SSL and SASL_SSL listeners from PEM files, and the principal a client
certificate names.

The principal is Kafka's default: ``User:`` and the certificate subject's distinguished
name in RFC 2253 form, most specific first (``User:CN=alice,O=example``); a client
without a certificate (``ssl.client.auth=requested`` or ``none``) is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import ssl
from typing import Any, Protocol

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}

ANONYMOUS = "User:ANONYMOUS"

#: OpenSSL's long attribute names as Java's X500Principal writes them (RFC 2253 keywords).
_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
    "emailAddress": "EMAILADDRESS",
}


class TlsSettings(Protocol):
    """What ``server_context`` needs (a narrow view of ``GatewayConfig``)."""

    ssl_keystore_location: str
    ssl_keystore_certificate_chain: str
    ssl_key_password: str
    ssl_truststore_location: str
    ssl_client_auth: str


def server_context(settings: TlsSettings, *, sasl: bool = False) -> ssl.SSLContext:
    """Raises ``ValueError`` for a missing or unreadable key, chain or trust store. A
    SASL_SSL listener (``sasl``) asks for no client certificate: SASL authenticates
    there (KIP-684: ``ssl.client.auth`` is the SSL listeners')."""
    if not settings.ssl_keystore_location:
        raise ValueError("an SSL or SASL_SSL listener needs ssl.keystore.location (PEM)")
    mode = CLIENT_AUTH.get(settings.ssl_client_auth.lower())
    if mode is None:
        raise ValueError(
            f"ssl.client.auth must be required, requested or none, got {settings.ssl_client_auth!r}"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    chain = settings.ssl_keystore_certificate_chain or settings.ssl_keystore_location
    try:
        context.load_cert_chain(
            chain, settings.ssl_keystore_location, settings.ssl_key_password or None
        )
        if settings.ssl_truststore_location:
            context.load_verify_locations(cafile=settings.ssl_truststore_location)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"TLS key material: {exc}") from exc
    if mode != ssl.CERT_NONE and not settings.ssl_truststore_location:
        raise ValueError("ssl.client.auth needs ssl.truststore.location (PEM CA bundle)")
    context.verify_mode = ssl.CERT_NONE if sasl else mode
    return context


def certificate_principal(peercert: Any) -> str:
    """``User:<subject DN>`` of a verified peer certificate (``getpeercert()``)."""
    if not peercert or "subject" not in peercert:
        return ANONYMOUS
    parts = []
    for rdn in reversed(peercert["subject"]):
        parts.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(parts) if parts else ANONYMOUS


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out
