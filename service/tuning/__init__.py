"""Hyperparameter tuning jobs: a search over a training job's hyperparameters, each trial
an ordinary training job of the tuning job's project."""
