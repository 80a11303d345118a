"""Use cases: each service is one thing the pipeline does, wired to ports, never to an SDK."""
