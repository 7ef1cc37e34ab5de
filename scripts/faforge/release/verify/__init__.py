"""The verify stage: each package's and wheel's gates, asked of the family that owns it, recorded per sha256."""
