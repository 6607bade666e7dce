"""The mlgate admission webhook, imported as `mlgate_webhook`."""
