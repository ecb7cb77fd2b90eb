"""Output quality, measured: what a setting changes in what the model writes."""
