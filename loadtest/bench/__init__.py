"""weft's benchmark runner (`loadtest/bench.py`): one scenario module per benchmark under
`scenarios/`, each setting up its own fleet in a `Sitting` and returning a markdown summary and
its figures (for the A/B ratios)."""
