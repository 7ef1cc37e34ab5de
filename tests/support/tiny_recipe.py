"""A stand-in for recipes/flash-attn/recipe.yaml that builds in a second: the same variant keys and
build-string formula, no compile. `faforge build` tests put it in a scratch checkout.
`@FAIL@` is the python variant whose build script exits 3 (a failing cell).
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
    - ${{ "exit 3" if python == "@FAIL@" else "true" }}
    - mkdir -p $PREFIX/share && echo ok > $PREFIX/share/flash-attn-standin.txt
requirements:
  run:
    - python ${{ python }}
"""
