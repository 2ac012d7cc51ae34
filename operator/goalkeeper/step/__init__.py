"""The step runtime: `goalkeeper-step observe | act | repair`."""
