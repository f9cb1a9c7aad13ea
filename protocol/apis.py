"""The types of the API registry: which Kafka APIs exist, in which versions, and how
their bodies are decoded and encoded (by kafka-python's ``kafka.protocol`` classes,
except where an ``ApiSpec`` names a decoder of ours: Produce, whose records must not be
copied).

The gateway's handler registry holds one ``ApiSpec`` per implemented API; the
ApiVersions answer is built from those specs, so nothing is advertised that has no
handler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidegate.protocol.errors import KafkaProtocolError
from tidegate.protocol.nulls import invalid_field


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One Kafka API as tidegate implements it.

    ``request_class``/``response_class`` are ``kafka.protocol`` message classes
    (e.g. ``ProduceRequest``); ``min_version``..``max_version`` is the range tidegate
    implements, which must lie inside the range the classes know.
    """

    request_class: Any
    response_class: Any
    min_version: int
    max_version: int
    #: ``decoder(frame, body_offset, version)`` used instead of the class's decoder (it
    #: must raise ``KafkaProtocolError`` on a bad body).
    decoder: Callable[[memoryview, int, int], Any] | None = None

    def __post_init__(self) -> None:
        known = int(self.request_class.max_version)
        if not 0 <= self.min_version <= self.max_version <= known:
            raise ValueError(
                f"{self.name}: versions {self.min_version}-{self.max_version} "
                f"outside what kafka.protocol knows (0-{known})"
            )

    @property
    def api_key(self) -> int:
        return int(self.request_class.API_KEY)

    @property
    def name(self) -> str:
        return str(self.request_class.name).removesuffix("Request")

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def request_header_flexible(self, version: int) -> bool:
        """Whether a request of this version uses request header v2. Versions above what
        the classes know are taken as flexible (every API's newest versions are)."""
        known = int(self.request_class.max_version)
        return bool(self.request_class.flexible_version_q(min(max(version, 0), known)))

    def response_header_flexible(self, version: int) -> bool:
        """Whether the response uses header v1. Quirk: ApiVersions answers always use v0."""
        if self.api_key == API_VERSIONS_KEY:
            return False
        return bool(self.response_class.flexible_version_q(version))

    def decode_request(self, frame: memoryview, body_offset: int, version: int) -> Any:
        """Decode the body of a request frame (it starts at ``body_offset``, after the
        header); any codec failure is a ``KafkaProtocolError``."""
        if self.decoder is not None:
            return self.decoder(frame, body_offset, version)
        body = frame[body_offset:]
        try:
            request = self.request_class.decode(body, version=version)
        except Exception as exc:  # the generated codecs raise many kinds of errors
            raise KafkaProtocolError(f"bad {self.name} v{version} body: {exc!r}") from exc
        wrong = invalid_field(self.request_class._struct, request, version)
        if wrong is not None:
            raise KafkaProtocolError(f"bad {self.name} v{version} body: {wrong}")
        return request

    def encode_response(self, response: Any, version: int) -> bytes:
        return bytes(response.encode(version=version))


#: ApiVersions' key; its answers have protocol quirks of their own.
API_VERSIONS_KEY = 18
