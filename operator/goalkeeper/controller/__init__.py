"""The operator: kopf handlers that carry the engine's decisions out in a cluster."""
