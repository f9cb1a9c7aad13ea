"""The controller's admin REST service: ``create_app`` builds it, ``serve_rest`` serves it."""

from tidegate.gateway.admin.rest.app import RestLimits, create_app
from tidegate.gateway.admin.rest.server import bound_port, serve_rest, stop_rest

__all__ = ["RestLimits", "bound_port", "create_app", "serve_rest", "stop_rest"]
