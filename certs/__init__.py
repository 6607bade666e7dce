"""Certificates for the mlgate webhook, imported as `mlgate_certs`."""
