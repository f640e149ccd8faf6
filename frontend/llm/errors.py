"""The one error the `llm` layer raises for a request it cannot lower for the engine.

It is always the client's doing (a bad value, a prompt too long, a constraint that does not
parse), so every API style answers it as its own "bad request"; `param` names the field.
"""

from __future__ import annotations


class InvalidRequestError(ValueError):
    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
