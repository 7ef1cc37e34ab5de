"""The package families faforge builds, one package each (families/<name>/), as cibuildwheel's platforms/.

A family package holds everything that tells its family apart: its matrix rows, plan jobs and their cost,
build, packages, gates, doctor rules, page lines, release discovery and GPU suite. Each stage declares the
hooks it needs as a small Protocol beside its own code; `faforge.families.registry.FAMILIES` lists the
family modules (`faforge.families.<name>.module`), and the commands hand them to the stages, which iterate
them and never name one. This file and each family's `__init__.py` import nothing: a recipe ships a family's
build code (its `backend`) with the checker, whose environments have the standard library only.
"""
