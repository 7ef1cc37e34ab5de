"""Wheels for pip and uv (the pip world), made from what the conda builds made: nothing is compiled for pip.

  filename   a wheel's file name taken apart (PEP 427), before anything reads the file
  facts      a wheel's name, version, tags and METADATA, read without trusting the file (read_wheel -> WheelFacts)
  writer     a deterministic PEP 427 wheel from a WheelSpec (RECORD, WHEEL, METADATA), written atomically
  manylinux  the platform tag from auditwheel's own policy data, over what faforge.abi reads of the ELF files
  layout     pip's site-packages layout: RUNPATHs, local labels, build tags, the torch-minor requirement
  patch      a binary's RUNPATH set with patchelf, and the proof that nothing else changed
  kernel     the kernel wheel from a kernel package's library (and the CUDA runtime torch's METADATA names)
  glue       the glue wheel of one pip cell from the backend's raw wheel
  kinds      WheelKind: a kind of wheel a family makes, how its label reads and how it is packed
  built      BuiltWheel, what packing returns
A family's own wheels are packed in its package (faforge.families.<name>.wheel); the CLI is
faforge.commands.wheel (`faforge wheel KIND`).
"""
