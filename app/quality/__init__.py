"""Live quality: labels joined to the pipeline's decisions, precision and recall as metrics."""
