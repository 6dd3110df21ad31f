"""The Fetch pick-and-lift task."""
