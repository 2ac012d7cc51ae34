"""goalkeeper: a Kubernetes operator that finishes an authorized goal."""

__version__ = "0.1.0"
