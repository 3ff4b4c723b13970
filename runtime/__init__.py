"""The instance agent: what runs on every instance of a job and runs its script."""
