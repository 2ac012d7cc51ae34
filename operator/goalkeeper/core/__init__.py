"""The pure domain core: models, engine, progress, reports, guards.

Nothing here talks to Kubernetes, reads a clock or does I/O; callers pass `now`.
"""
