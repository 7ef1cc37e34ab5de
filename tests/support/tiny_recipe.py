"""A stand-in for recipes/flash-attn/recipe.yaml that builds in a second: the same variant keys and
build-string formula, no compile. `faforge build` tests put it in a scratch checkout.
`@FAIL@` names the python variant whose build script exits 3 (a failing cell): "3.13.*" matches
the variant "3.13.* *_cp313" it starts.
"""

TINY_RECIPE = """\
schema_version: 1
context:
  torch_minor: ${{ (torch_version | split('.'))[:2] | join('_') }}
  cuda_tag: ${{ cuda_compiler_version | replace('.', '') }}
package:
  name: flash-attn
  version: "2.8.3.post2"
build:
  number: 0
  string: py${{ python | version_to_buildstring }}_torch${{ torch_minor }}_cu${{ cuda_tag }}_cxx11abi${{ cxx11_abi }}_h${{ hash }}_0
  script:
    - echo "stand-in build for torch ${{ torch_version }} (${{ torch_world }}), archs ${{ cuda_archs }}"
    - ${{ "exit 3" if "@FAIL@" in python else "true" }}
    - mkdir -p $PREFIX/share && echo ok > $PREFIX/share/flash-attn-standin.txt
requirements:
  run:
    - python ${{ python }}
"""  # noqa: E501 (a build-string template in YAML cannot wrap)

# The split recipe in miniature: a libflash-attn-kernels output that uses only CUDA, the
# arch list and the Philox offset width (build string cu<tag>_sm<archs>_philox<bits>_h<hash>_<n>, as
# faforge.matrix.kernels expects and recipes/flash-attn/recipe.yaml writes it) and passes a piece's TUs
# to its script, and the flash-attn output, which pins that exact kernel build.
# torch_version appears only inside the flash-attn output: a top-level `context:` entry is evaluated
# for every output, so a torch-derived one there makes torch_version a used variable of the kernel
# output too, and its hash (so its build string) differs per torch minor (tests/matrix/test_kernels.py).
TINY_SPLIT_RECIPE = """\
schema_version: 1
context:
  version: "2.8.3.post2"
  cuda_tag: ${{ cuda_compiler_version | replace('.', '') }}
  archs_tag: ${{ cuda_archs | replace(';', '_') | replace('+PTX', 'ptx') }}
recipe:
  name: flash-attn-split
  version: ${{ version }}
outputs:
  - package:
      name: libflash-attn-kernels
      version: ${{ version }}
    build:
      number: 0
      string: cu${{ cuda_tag }}_sm${{ archs_tag }}_philox${{ philox_offset_bits }}_h${{ hash }}_0
      script:
        env:
          FAFORGE_BUILD_TUS: ${{ env.get("FAFORGE_BUILD_TUS", default="") }}
        content:
          - echo "stand-in kernels for CUDA ${{ cuda_compiler_version }}, archs ${{ cuda_archs }}, philox offset ${{ philox_offset_bits }} bits, TUs [$FAFORGE_BUILD_TUS]"
          - if [ -z "$FAFORGE_BUILD_TUS" ]; then mkdir -p $PREFIX/lib && echo ok > $PREFIX/lib/libflash_attn_kernels.txt; fi
  - package:
      name: flash-attn
      version: ${{ version }}
    build:
      number: 0
      # As the real recipe: a pip world's glue is a wheel, its variant files build only kernel packages.
      skip:
        - torch_world == "pypi"
      string: py${{ python | version_to_buildstring }}_torch${{ (torch_version | split('.'))[:2] | join('_') }}_cu${{ cuda_tag }}_cxx11abi${{ cxx11_abi }}_h${{ hash }}_0
      script:
        - echo "stand-in glue for torch ${{ torch_version }} (${{ torch_world }})"
        - mkdir -p $PREFIX/share && echo ok > $PREFIX/share/flash-attn-standin.txt
    requirements:
      run:
        - python ${{ python }}
        - ${{ pin_subpackage('libflash-attn-kernels', exact=True) }}
"""  # noqa: E501 (a build-string template in YAML cannot wrap)
