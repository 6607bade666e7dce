"""Kubernetes API access shared by the transports (webhook, reconciler); never by the engine."""
