"""Drift: live counts over event-time windows against a model's training reference
(app.scoring.drift_reference), and PSI."""
