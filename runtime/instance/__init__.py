"""The instance the runtime makes ready: its environment, layers, installs and user."""
