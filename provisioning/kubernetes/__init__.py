"""The Kubernetes backend: one pod per instance, through the official client."""
