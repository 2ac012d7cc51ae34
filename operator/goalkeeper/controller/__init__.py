"""The operator: watches and handlers that carry the engine's decisions out in a cluster."""
