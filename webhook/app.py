"""The FastAPI app: health, readiness and metrics, with the admission endpoints as lean ASGI routes.

    POST /validate, POST /mutate    AdmissionReview admission.k8s.io/v1 (endpoint.AdmissionEndpoint)
    GET  /healthz                   the process is alive
    GET  /readyz                    policies loaded and TLS ready; the JSON says what is missing
    GET  /metrics                   Prometheus text format
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from starlette.routing import Route

from mlgate import __version__

from .endpoint import AdmissionEndpoint
from .metrics import CONTENT_TYPE
from .service import Service


def create_app(service: Service) -> FastAPI:
    app = FastAPI(title="mlgate webhook", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    # Plain ASGI routes, inserted first: no request model, no dependency injection on the hot path.
    app.router.routes[:0] = [
        Route("/validate", AdmissionEndpoint(service, "validate")),
        Route("/mutate", AdmissionEndpoint(service, "mutate")),
    ]

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
    return app
