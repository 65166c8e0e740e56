"""Rules the fraud team writes: a small expression language, versioned rules, their evaluation."""
