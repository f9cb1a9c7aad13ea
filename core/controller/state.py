"""The stream state machine: which state may follow which.

A stream's state record is the barrier that lets only one kind of workflow run on it at a
time. Every workflow moves the stream out of ``ACTIVE`` and back, except seal (to
``SEALED``) and delete (from ``SEALED`` to gone). A state may always be re-entered, so a
resumed workflow can repeat the transition it already made.
"""

from __future__ import annotations

from tidegate.core.controller.api import ConflictError, StreamState

S = StreamState

#: state -> the states that may follow it.
TRANSITIONS: dict[StreamState, frozenset[StreamState]] = {
    S.CREATING: frozenset({S.ACTIVE}),
    S.ACTIVE: frozenset({S.UPDATING, S.SCALING, S.TRUNCATING, S.SEALING, S.SEALED}),
    S.UPDATING: frozenset({S.ACTIVE}),
    S.SCALING: frozenset({S.ACTIVE}),
    S.TRUNCATING: frozenset({S.ACTIVE}),
    S.SEALING: frozenset({S.SEALED}),
    S.SEALED: frozenset({S.DELETING}),
    S.DELETING: frozenset(),
}


def allowed(current: StreamState, new: StreamState) -> bool:
    return new == current or new in TRANSITIONS[current]


def check_transition(stream: str, current: StreamState, new: StreamState) -> None:
    """Raise ``ConflictError`` unless ``current -> new`` is allowed."""
    if not allowed(current, new):
        raise ConflictError(f"stream {stream} is {current.value}; it cannot go to {new.value}")
