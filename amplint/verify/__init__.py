"""amplint's runtime verifier (in progress)."""
