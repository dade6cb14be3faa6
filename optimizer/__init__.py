"""Performance and serving models, candidate enumeration, the fleet MILP and its results."""
