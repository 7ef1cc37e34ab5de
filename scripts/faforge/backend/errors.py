"""The one error the build raises: a problem the person running it can fix."""

from __future__ import annotations


class BuildError(Exception):
    """A problem the person running the build can fix; printed without traceback."""
