"""The HTTP face of the service: the FastAPI app, its routes, dependencies and docs."""
