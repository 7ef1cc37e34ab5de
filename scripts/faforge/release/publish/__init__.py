"""The publish stage: verified packages into a conda channel, verified wheels into the wheel index."""
