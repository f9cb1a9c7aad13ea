"""The one place where failures become HTTP status codes.

Every error response is ``{"message": ...}``. A user's mistake is never a 500: invalid
input (request validation included) is 400, a missing scope or stream 404, a request the
stream's state forbids 409, an oversized body 413, a call before the controller is ready
503. Only a fault of ours (an unexpected exception) is a 500.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from tidegate.core.controller.api import (
    ConflictError,
    ControllerError,
    InvalidArgumentError,
    ScopeExistsError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamExistsError,
    StreamNotFoundError,
    TransactionNotFoundError,
)

log = logging.getLogger(__name__)

#: Controller error -> HTTP status. Subclasses map as their nearest listed base.
STATUS_OF: dict[type[ControllerError], int] = {
    InvalidArgumentError: 400,
    ScopeNotFoundError: 404,
    StreamNotFoundError: 404,
    TransactionNotFoundError: 404,
    ScopeExistsError: 409,
    StreamExistsError: 409,
    ScopeNotEmptyError: 409,
    ConflictError: 409,
}


class BadRequest(Exception):
    """Invalid input found by the REST layer itself (beyond the schema), e.g. a bound."""


class NotReady(Exception):
    """The controller has not finished starting."""


def status_of(error: ControllerError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS_OF:
            return STATUS_OF[cls]
    return 500


def _message(status: int, text: str) -> JSONResponse:
    return JSONResponse({"message": text}, status_code=status)


def _describe(error: Exception) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _validation_message(error: RequestValidationError) -> str:
    parts = []
    for e in error.errors()[:10]:
        where = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every failure into ``{"message": ...}``."""

    @app.exception_handler(ControllerError)
    async def _controller(_: Request, e: Exception) -> JSONResponse:
        assert isinstance(e, ControllerError)
        status = status_of(e)
        if status == 500:
            log.error("controller fault", exc_info=e)
        return _message(status, _describe(e))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: Exception) -> JSONResponse:
        assert isinstance(e, RequestValidationError)
        return _message(400, _validation_message(e))

    @app.exception_handler(BadRequest)
    async def _bad(_: Request, e: Exception) -> JSONResponse:
        return _message(400, str(e))

    @app.exception_handler(NotReady)
    async def _not_ready(_: Request, e: Exception) -> JSONResponse:
        return _message(503, "the controller is starting")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: Exception) -> JSONResponse:
        assert isinstance(e, StarletteHTTPException)
        return JSONResponse(
            {"message": str(e.detail)}, status_code=e.status_code, headers=e.headers
        )

    @app.exception_handler(Exception)
    async def _fault(_: Request, e: Exception) -> JSONResponse:
        log.error("internal error in the admin REST service", exc_info=e)
        return _message(500, f"internal error: {_describe(e)}")
