"""Wheels for pip and uv (issue 33): read a wheel's facts, write wheels, decide the manylinux tag from
auditwheel's policy data, and pack the kernel, glue and FlashAttention-3 wheels from what the conda
builds made (the kernel library byte for byte, only its RUNPATH set for pip's layout).

  facts      a wheel's name, version, tags and METADATA, read without trusting the file
"""
