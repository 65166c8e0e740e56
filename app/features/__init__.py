"""Card features: one declaration, the online state, the offline evaluator and the skew audit."""
