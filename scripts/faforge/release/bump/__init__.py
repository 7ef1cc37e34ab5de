"""A new torch release found on conda-forge or a wheel index, and the matrix rows it adds."""
