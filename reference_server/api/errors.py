"""OpenAI-format errors: every failure the API reports is `{"error": {message, type, param, code}}`."""

from __future__ import annotations

import json

from aiohttp import web

# The `type` OpenAI's own API uses for each status (clients branch on the status, not on this).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


class APIError(Exception):
    """A failure to report to the client; raised anywhere in a handler, rendered by the middleware."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None, close: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.close = close  # end the connection after answering (its state is unknown)

    def payload(self) -> dict:
        """The JSON body (also sent as an SSE event when streaming has already begun)."""
        error_type = _ERROR_TYPES.get(self.status, "invalid_request_error" if self.status < 500 else "server_error")
        return {"error": {"message": self.message, "type": error_type, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        """The HTTP response for this error."""
        response = web.Response(status=self.status, text=json.dumps(self.payload()), content_type="application/json")
        if self.close:
            response.force_close()
        return response


def bad_request(message: str, param: str | None = None) -> APIError:
    """A 400: the request itself is wrong."""
    return APIError(400, message, param=param)
