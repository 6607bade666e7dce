"""Property tests and fuzzing of malformed shapes (tests/fuzz/shapes.py builds them; bench/fuzz.py runs many)."""
