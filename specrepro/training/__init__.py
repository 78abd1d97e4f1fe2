"""Training: Medusa heads on the frozen target (and, later, PPD prompt tokens and online updates)."""
