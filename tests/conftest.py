"""Fixtures shared by every test folder; the control plane is one per session."""

pytest_plugins = ["tests.support.cluster_fixtures"]
