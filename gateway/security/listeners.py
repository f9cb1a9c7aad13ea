"""Kafka's listener configuration: ``listeners``, ``advertised.listeners`` and
``listener.security.protocol.map``.

``listeners`` is ``NAME://HOST:PORT,...``; a name is its own security protocol unless the
map says otherwise (``CLIENT:SASL_SSL``). An empty host listens on every interface, as
Kafka's ``PLAINTEXT://:9092``. ``advertised.listeners`` names the address given to
clients per listener; a listener it does not name advertises where it listens.
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: Kafka's default map: each protocol's name maps to itself.
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(value: str) -> dict[str, str]:
    """Kafka's map; the protocol names map to themselves unless it says otherwise."""
    mapping = {p: p for p in PROTOCOLS}
    for item in _items(value or DEFAULT_PROTOCOL_MAP):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in PROTOCOLS:
            raise ValueError(
                f"listener.security.protocol.map: expected NAME:PROTOCOL with PROTOCOL one "
                f"of {', '.join(PROTOCOLS)}, got {item!r}"
            )
        mapping[name.strip().upper()] = protocol
    return mapping


def _endpoint(item: str, what: str) -> tuple[str, str, int]:
    name, sep, address = item.partition("://")
    host, colon, port = address.rpartition(":")
    if not sep or not name or not colon or not port.isdigit():
        raise ValueError(f"{what}: expected NAME://HOST:PORT, got {item!r}")
    if int(port) > 65535:
        raise ValueError(f"{what}: port {port} of {item!r} is out of range: must be 0 to 65535")
    return name.strip().upper(), host.strip("[]"), int(port)


def _items(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_listeners(listeners: str, protocol_map: str) -> list[Listener]:
    """The listeners in configuration order (the first one is what cluster mode and
    the ``tidegate ready`` line announce)."""
    mapping = parse_protocol_map(protocol_map)
    found: list[Listener] = []
    for item in _items(listeners):
        name, host, port = _endpoint(item, "listeners")
        protocol = mapping.get(name)
        if protocol is None:
            raise ValueError(
                f"listeners: {name} is not in listener.security.protocol.map "
                f"(add {name}:PROTOCOL to it)"
            )
        if any(existing.name == name for existing in found):
            raise ValueError(f"listeners: {name} is named twice")
        found.append(Listener(name, protocol, host, port))
    if not found:
        raise ValueError("listeners: no listener given")
    return found


def parse_advertised(value: str, listeners: list[Listener]) -> dict[str, tuple[str, int]]:
    names = {listener.name for listener in listeners}
    advertised: dict[str, tuple[str, int]] = {}
    for item in _items(value):
        name, host, port = _endpoint(item, "advertised.listeners")
        if name not in names:
            raise ValueError(f"advertised.listeners: {name} is not one of the listeners")
        if not host:
            raise ValueError(f"advertised.listeners: {name} needs a host clients can reach")
        advertised[name] = (host, port)
    return advertised
