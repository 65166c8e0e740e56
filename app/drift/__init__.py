"""Drift: a model's training reference, live counts over event-time windows, and PSI."""
