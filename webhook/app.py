"""The FastAPI app: health, readiness and metrics, with the admission endpoints as lean ASGI routes.

    POST /validate, POST /mutate    AdmissionReview admission.k8s.io/v1 (endpoint.AdmissionEndpoint)
    GET  /healthz                   the process is alive
    GET  /readyz                    policies loaded and TLS ready; the JSON says what is missing
    GET  /metrics                   Prometheus text format (also served over plain HTTP on --metrics-port)
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from starlette.routing import Route

from mlgate import __version__

from .endpoint import AdmissionEndpoint, Receive, Scope, Send
from .metrics import CONTENT_TYPE
from .service import Service


class AdmissionFront:
    """What uvicorn serves: the admission paths go straight to their endpoints, the rest to FastAPI.

    FastAPI's middleware stack and router cost more than a small review does; the endpoints catch
    their own errors and need none of it. The same endpoints stay routed inside the FastAPI app too.
    """

    def __init__(self, app: FastAPI, endpoints: dict[str, AdmissionEndpoint]):
        self.app = app
        self.endpoints = endpoints

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.endpoints.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is not None:
            await endpoint(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def create_app(service: Service) -> AdmissionFront:
    app = FastAPI(title="mlgate webhook", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    endpoints = {"/validate": AdmissionEndpoint(service, "validate"), "/mutate": AdmissionEndpoint(service, "mutate")}
    # Plain ASGI routes, inserted first: no request model, no dependency injection.
    app.router.routes[:0] = [Route(path, endpoint) for path, endpoint in endpoints.items()]

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        ready, detail = service.readiness()
        return JSONResponse(detail, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type=CONTENT_TYPE)

    app.state.service = service
    return AdmissionFront(app, endpoints)
