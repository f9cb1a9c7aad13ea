"""Each client family's settings for a secured listener, and one produce-and-consume
round trip through it (the record read back proves the connection worked end to end)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from typing import Any

from tests.security.conftest import USERS, Secure

KCAT = shutil.which("kcat") or "kcat"


def librdkafka_conf(s: Secure, protocol: str, mechanism: str | None, user: str | None,
                    password: str | None = None, cert: str | None = None) -> dict[str, str]:
    conf = {"bootstrap.servers": s.bootstrap(protocol), "security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = str(s.certs.ca)
    if cert is not None:
        conf["ssl.certificate.location"] = str(s.certs.certs[cert])
        conf["ssl.key.location"] = str(s.certs.keys[cert])
    if mechanism is not None and user is not None:
        conf.update({"sasl.mechanisms": mechanism, "sasl.username": user,
                     "sasl.password": password if password is not None else USERS[user]})
    return conf


def kafka_python_conf(s: Secure, protocol: str, mechanism: str | None, user: str | None,
                      password: str | None = None, cert: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap_servers": s.bootstrap(protocol),
                            "security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        conf["ssl_cafile"] = str(s.certs.ca)
        conf["ssl_check_hostname"] = False
    if cert is not None:
        conf["ssl_certfile"] = str(s.certs.certs[cert])
        conf["ssl_keyfile"] = str(s.certs.keys[cert])
    if mechanism is not None and user is not None:
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user,
                     "sasl_plain_password": password if password is not None else USERS[user]})
    return conf


def confluent_round_trip(conf: dict[str, str], topic: str) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer

    value = uuid.uuid4().bytes
    errors: list[Any] = []
    producer = Producer({**conf, "error_cb": errors.append, "message.timeout.ms": 10000})
    delivered: list[Any] = []
    producer.produce(topic, value, on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    if not delivered or delivered[0] is not None:
        raise KafkaException(delivered[0] if delivered else errors[0] if errors else "no delivery")
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "error_cb": errors.append})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            if msg.value() == value:
                return
        raise AssertionError(f"record not read back; errors {errors[:3]}")
    finally:
        consumer.close()


def kafka_python_round_trip(conf: dict[str, Any], topic: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    value = uuid.uuid4().bytes
    producer = KafkaProducer(**conf)
    try:
        producer.send(topic, value).get(timeout=15)
    finally:
        producer.close()
    consumer = KafkaConsumer(**conf, group_id=f"g-{topic}", auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=500).values():
                if any(m.value == value for m in msgs):
                    consumer.commit()
                    return
        raise AssertionError("record not read back")
    finally:
        consumer.close()


def aiokafka_round_trip(conf: dict[str, Any], topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    conf = dict(conf)
    conf.pop("ssl_check_hostname", None)
    cafile = conf.pop("ssl_cafile", None)
    certfile, keyfile = conf.pop("ssl_certfile", None), conf.pop("ssl_keyfile", None)
    if cafile is not None:
        ctx = create_ssl_context(cafile=cafile, certfile=certfile, keyfile=keyfile)
        ctx.check_hostname = False
        conf["ssl_context"] = ctx

    async def run() -> None:
        value = uuid.uuid4().bytes
        producer = AIOKafkaProducer(**conf)
        try:
            await producer.start()
            await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **conf, group_id=f"g-{topic}",
                                    auto_offset_reset="earliest")
        try:
            await consumer.start()
            async def find() -> None:
                async for msg in consumer:
                    if msg.value == value:
                        return
            await asyncio.wait_for(find(), 30)
        finally:
            await consumer.stop()

    asyncio.run(run())


def kcat(conf: dict[str, str], *args: str, stdin: bytes | None = None,
         metadata_timeout_s: int = 10) -> subprocess.CompletedProcess[bytes]:
    opts = [a for k, v in conf.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    return subprocess.run(
        [KCAT, "-b", conf["bootstrap.servers"], "-m", str(metadata_timeout_s), *opts, *args],
        input=stdin,
        capture_output=True, timeout=60, check=False,
    )


def kcat_round_trip(conf: dict[str, str], topic: str) -> None:
    value = uuid.uuid4().hex.encode()
    out = kcat(conf, "-P", "-t", topic, "-p", "0", stdin=value + b"\n")
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    out = kcat(conf, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e")
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    assert value in out.stdout, out.stdout
