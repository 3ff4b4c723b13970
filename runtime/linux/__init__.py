"""What the runtime asks of Linux itself: namespaces, mounts, confinement, /proc."""
