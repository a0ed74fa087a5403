"""pytest plugin entry point of the verifier (in progress)."""
