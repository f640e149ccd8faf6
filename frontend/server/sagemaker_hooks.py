"""A SageMaker customer script's hooks, found as vLLM's `sagemaker_standards_bootstrap` finds
them (`model_hosting_container_standards.sagemaker.bootstrap`), for asgi_middleware.py to run.

The script is `$SAGEMAKER_MODEL_PATH/$CUSTOM_SCRIPT_FILENAME` (default /opt/ml/model/model.py),
imported by the package's loader so that its decorators register; the `CUSTOM_*` variables name
functions instead ("model.py:fn", "module:fn"; a variable wins over a decorator):

- throttle middleware: `@custom_middleware("throttle")`, CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE;
- pre_post_process middleware: `@custom_middleware("pre_post_process")`,
  CUSTOM_FASTAPI_MIDDLEWARE_PRE_POST_PROCESS, or else `@input_formatter` / `@output_formatter`,
  CUSTOM_PRE_PROCESS / CUSTOM_POST_PROCESS, which the package combines into one;
- handlers answering GET /ping and POST /invocations: `@custom_ping_handler`,
  `@custom_invocation_handler`, CUSTOM_FASTAPI_PING_HANDLER, CUSTOM_FASTAPI_INVOCATION_HANDLER,
  or the script's `custom_sagemaker_ping_handler` / `custom_sagemaker_invocation_handler`.

Not supported, each named in a warning at start: a handler variable naming a router path
(which the package ignores too), handlers the script registers for other routes or transforms
(LoRA adapters, sessions), and SAGEMAKER_ENABLE_STATEFUL_SESSIONS.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from vllm_pyfrontend import environment
from vllm_pyfrontend.server.asgi_middleware import Middleware, check_kind

log = logging.getLogger(__name__)

_SCRIPT_DIR, _SCRIPT = "SAGEMAKER_MODEL_PATH", "CUSTOM_SCRIPT_FILENAME"
_DEFAULT_DIR, _DEFAULT_SCRIPT = "/opt/ml/model/", "model.py"
_PING_ENV, _INVOKE_ENV = "CUSTOM_FASTAPI_PING_HANDLER", "CUSTOM_FASTAPI_INVOCATION_HANDLER"
_MIDDLEWARE_ENVS = {"throttle": ("CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE",),
                    "pre_post_process": ("CUSTOM_FASTAPI_MIDDLEWARE_PRE_POST_PROCESS", "CUSTOM_PRE_PROCESS",
                                         "CUSTOM_POST_PROCESS")}
_SESSIONS_ENV = "SAGEMAKER_ENABLE_STATEFUL_SESSIONS"
# The routes the package mounts the ping and invocation handlers on (its sagemaker_router).
_ROUTES = {"ping": ("GET", "/ping"), "invoke": ("POST", "/invocations")}


@dataclass
class SageMakerHooks:
    throttle: list[Middleware] = field(default_factory=list)  # at most one each
    pre_post_process: list[Middleware] = field(default_factory=list)
    endpoints: dict[tuple[str, str], object] = field(default_factory=dict)  # (method, path) -> function


def _env(name: str) -> str | None:
    return environment.sagemaker_setting(name)


def script_path() -> str:
    return os.path.join(_env(_SCRIPT_DIR) or _DEFAULT_DIR, _env(_SCRIPT) or _DEFAULT_SCRIPT)


def configured() -> bool:
    """Whether there is anything to load: the script exists, or a hook's variable is set."""
    names = [_PING_ENV, _INVOKE_ENV, _SESSIONS_ENV, *(n for ns in _MIDDLEWARE_ENVS.values() for n in ns)]
    return any(_env(n) for n in names) or os.path.isfile(script_path())


def load(announce: bool) -> SageMakerHooks:
    """The script's hooks (its import errors stop the start); `announce`: warn about what is
    not supported."""
    standards = _import_standards()
    from model_hosting_container_standards.common.fastapi.middleware import middleware_registry
    from model_hosting_container_standards.common.handler import handler_registry
    from model_hosting_container_standards.sagemaker.config import SageMakerConfig
    from model_hosting_container_standards.sagemaker.sagemaker_loader import SageMakerFunctionLoader

    try:
        loader = SageMakerFunctionLoader.get_function_loader()  # imports the script
        middleware_registry.load_middlewares(loader)
        standards.register_sagemaker_overrides()
    except Exception as e:  # the customer's script: any error stops the start
        raise ValueError(f"SageMaker customer script {script_path()}: {type(e).__name__}: {e}") from e
    hooks = SageMakerHooks()
    unsupported = []
    for name, envs in _MIDDLEWARE_ENVS.items():
        info = middleware_registry.get_middleware(name)
        if info is not None:
            getattr(hooks, name).append(check_kind(f"SageMaker {name} middleware", info.middleware))
        elif any(_env(n) for n in envs):
            unsupported.append(f"{'/'.join(envs)} (could not be loaded: see the error above)")
    for kind, route in _ROUTES.items():
        handler = handler_registry.get_handler(kind)
        if handler is not None:
            hooks.endpoints[route] = handler
    for env in (_PING_ENV, _INVOKE_ENV):
        if (_env(env) or "").startswith("/"):
            unsupported.append(f"{env}={_env(env)} (a router path; the package does not redirect either)")
    unsupported += [f"the {name!r} handler" for name in handler_registry.list_handlers() if name not in _ROUTES]
    if SageMakerConfig.from_env().enable_stateful_sessions:
        unsupported.append(f"{_SESSIONS_ENV} (stateful sessions)")
    if announce:
        for what in unsupported:
            log.warning("SageMaker hook not supported by this server, ignored: %s", what)
    return hooks


def _import_standards():
    """model_hosting_container_standards.sagemaker; its import sets the root logger's level and
    its handlers' to SAGEMAKER_CONTAINER_LOG_LEVEL (default ERROR): undone, as vLLM does."""
    root = logging.getLogger()
    levels = [(root, root.level)] + [(h, h.level) for h in root.handlers]
    try:
        import model_hosting_container_standards.sagemaker as standards
    finally:
        for item, level in levels:
            item.setLevel(level)
    return standards
