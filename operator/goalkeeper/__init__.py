"""goalkeeper: a Kubernetes operator that finishes an authorized goal."""

__version__ = "0.2.0"
