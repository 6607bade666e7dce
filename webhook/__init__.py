"""The mlgate admission webhook, imported as `mlgate_webhook`: a thin transport over the engine.

Modules: `review` (AdmissionReview in and out, no HTTP), `endpoint` (the ASGI hot path),
`app` (FastAPI: health, readiness, metrics), `server` (uvicorn over TLS), `policy_store`,
`facts_cache`, `kube` (watches), `tls`, `metrics`, `jsonlog`, `commands` (click).
Importing the package imports nothing else, so `mlgate --help` stays fast.
"""
