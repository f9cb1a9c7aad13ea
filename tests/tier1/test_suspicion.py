"""When a log gives up on a plog server: a request unanswered for ``timeout_ms``, but
never for silence that was this process's own. A node frozen past the timeout (SIGSTOP
in a fault campaign) found every request it had in flight unanswered on waking, gave up
on all three plog servers, its own included, and could not open a log for the next 10 s
(``NoReplicaError``: every server holding it suspect)."""

from __future__ import annotations

from tidegate.core.segmentstore.tier1.replicated.replicas import Replicas

TIMEOUT_MS = 10_000


class _Silent:
    """A connection with one request sent at ``sent``, never answered."""

    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.closed = False

    def oldest_age_s(self, now: float) -> float:
        return now - self.sent

    def close(self, reason: str = "closed") -> None:
        self.closed = True


def _replicas(sent: float) -> Replicas:
    replicas = Replicas(None, timeout_ms=TIMEOUT_MS)  # type: ignore[arg-type]
    replicas._conns["s1"] = _Silent(sent)  # type: ignore[assignment]
    return replicas


def test_a_server_silent_past_the_timeout_is_given_up_on() -> None:
    replicas = _replicas(sent=100.0)
    now = 100.0
    while now < 109.9:
        now += 0.25
        replicas.judge(min(now, 109.9))
    assert not replicas.is_suspect("s1")
    replicas.judge(110.15)
    assert replicas.is_suspect("s1")


def test_silence_while_this_process_stood_still_is_not_the_servers() -> None:
    replicas = _replicas(sent=100.0)
    replicas.judge(100.25)
    replicas.judge(112.0)  # frozen for 11.75 s: the request is 12 s old on waking
    assert not replicas.is_suspect("s1")
    now = 112.0
    while now < 121.9:  # awake, judging every 0.25 s
        now += 0.25
        replicas.judge(min(now, 121.9))
    assert not replicas.is_suspect("s1")
    replicas.judge(122.1)  # still silent a whole timeout after waking: the server's
    assert replicas.is_suspect("s1")
